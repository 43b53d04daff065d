#ifndef CSPEEXDSP_SHIM_H
#define CSPEEXDSP_SHIM_H

/* speexdsp's echo canceller, preprocessor and resampler: plain functions and integer request macros,
   all importable as they are. */
#include <speex/speex_echo.h>
#include <speex/speex_preprocess.h>
#include <speex/speex_resampler.h>

#endif
