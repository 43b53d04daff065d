#ifndef CALSA_SHIM_H
#define CALSA_SHIM_H

#include <alsa/asoundlib.h>

/* snd_lib_error_handler_t is variadic, so Swift cannot provide one: this no-op keeps ALSA from
   printing to stderr; errors are reported through return codes instead. */
static void calsa_silent_error_handler(const char *file, int line, const char *function, int err,
                                       const char *fmt, ...) {
    (void)file; (void)line; (void)function; (void)err; (void)fmt;
}
static inline int calsa_silence_errors(void) {
    return snd_lib_error_set_handler(calsa_silent_error_handler);
}
static inline int calsa_restore_errors(void) {
    return snd_lib_error_set_handler(NULL);
}

/* snd_pcm_hw_params_alloca / sw_params_alloca are macros over alloca: heap versions instead. */
static inline snd_pcm_hw_params_t *calsa_hw_params_new(void) {
    snd_pcm_hw_params_t *p = NULL;
    return snd_pcm_hw_params_malloc(&p) == 0 ? p : NULL;
}
static inline snd_pcm_sw_params_t *calsa_sw_params_new(void) {
    snd_pcm_sw_params_t *p = NULL;
    return snd_pcm_sw_params_malloc(&p) == 0 ? p : NULL;
}
/* Retype interleaved 16-bit buffers for the void * I/O calls. */
static inline snd_pcm_sframes_t calsa_writei(snd_pcm_t *pcm, const int16_t *buffer, snd_pcm_uframes_t frames) {
    return snd_pcm_writei(pcm, buffer, frames);
}
static inline snd_pcm_sframes_t calsa_readi(snd_pcm_t *pcm, int16_t *buffer, snd_pcm_uframes_t frames) {
    return snd_pcm_readi(pcm, buffer, frames);
}

#endif
