#ifndef COPUS_SHIM_H
#define COPUS_SHIM_H

#include <opus/opus.h>

/* opus_encoder_ctl / opus_decoder_ctl are variadic and the OPUS_SET_* request macros are not
   imported: one typed helper per control CallNode uses. Each returns the libopus error code. */
static inline int copus_set_bitrate(OpusEncoder *e, opus_int32 v) { return opus_encoder_ctl(e, OPUS_SET_BITRATE(v)); }
static inline int copus_get_bitrate(OpusEncoder *e, opus_int32 *v) { return opus_encoder_ctl(e, OPUS_GET_BITRATE(v)); }
static inline int copus_set_complexity(OpusEncoder *e, opus_int32 v) { return opus_encoder_ctl(e, OPUS_SET_COMPLEXITY(v)); }
static inline int copus_get_complexity(OpusEncoder *e, opus_int32 *v) { return opus_encoder_ctl(e, OPUS_GET_COMPLEXITY(v)); }
static inline int copus_set_vbr(OpusEncoder *e, opus_int32 v) { return opus_encoder_ctl(e, OPUS_SET_VBR(v)); }
static inline int copus_set_inband_fec(OpusEncoder *e, opus_int32 v) { return opus_encoder_ctl(e, OPUS_SET_INBAND_FEC(v)); }
static inline int copus_get_inband_fec(OpusEncoder *e, opus_int32 *v) { return opus_encoder_ctl(e, OPUS_GET_INBAND_FEC(v)); }
static inline int copus_set_packet_loss_perc(OpusEncoder *e, opus_int32 v) { return opus_encoder_ctl(e, OPUS_SET_PACKET_LOSS_PERC(v)); }
static inline int copus_set_dtx(OpusEncoder *e, opus_int32 v) { return opus_encoder_ctl(e, OPUS_SET_DTX(v)); }
static inline int copus_set_signal_voice(OpusEncoder *e) { return opus_encoder_ctl(e, OPUS_SET_SIGNAL(OPUS_SIGNAL_VOICE)); }
static inline int copus_get_lookahead(OpusEncoder *e, opus_int32 *v) { return opus_encoder_ctl(e, OPUS_GET_LOOKAHEAD(v)); }
static inline int copus_get_last_packet_duration(OpusDecoder *d, opus_int32 *v) { return opus_decoder_ctl(d, OPUS_GET_LAST_PACKET_DURATION(v)); }
static inline int copus_decoder_reset(OpusDecoder *d) { return opus_decoder_ctl(d, OPUS_RESET_STATE); }
static inline int copus_encoder_reset(OpusEncoder *e) { return opus_encoder_ctl(e, OPUS_RESET_STATE); }

static inline int copus_application_voip(void) { return OPUS_APPLICATION_VOIP; }

#endif
