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

#endif
