#ifndef CSIMHOST_H
#define CSIMHOST_H
#include <stdint.h>

/// The host's randomness replaced by a seeded stream, for a simulation that must replay byte for
/// byte: while on, getrandom (the call and the syscall), arc4random and /dev/urandom opened by
/// path (what Swift's SystemRandomNumberGenerator and Foundation's UUID read) all draw from a
/// SplitMix64 generator seeded here. Off, each forwards to the C library.
///
/// It works by defining those symbols in the executable that links this target, with the
/// executable's symbols exported (`-export-dynamic`), so the shared libraries bind to them first.
void csimhost_seed(uint64_t seed);
void csimhost_set_enabled(int enabled);
int csimhost_enabled(void);

/// The wall clock OpenSSL's DTLS timers read (gettimeofday called from libssl), in nanoseconds,
/// while the stream is on: a run's manual time, so a flight is resent when the run's time says,
/// not when the host happened to be slow. Negative: the real clock.
void csimhost_set_time(int64_t nanoseconds);

#endif
