#define _GNU_SOURCE
#include "CSimHost.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <unistd.h>

#include <pthread.h>

// The thread that seeded the stream (the simulation's one thread) draws from it; any other
// thread (a library's, a database queue's) draws from a stream of its own, so that when such a
// thread happens to draw does not shift the values the simulation sees.
static uint64_t state = 1;
static uint64_t other_state = 0x0DDBA11;
static pthread_t seeding_thread;
static int enabled = 0;

void csimhost_seed(uint64_t seed) {
    seeding_thread = pthread_self();
    __atomic_store_n(&state, seed, __ATOMIC_SEQ_CST);
    __atomic_store_n(&other_state, seed ^ 0x0DDBA11, __ATOMIC_SEQ_CST);
}
void csimhost_set_enabled(int on) { __atomic_store_n(&enabled, on, __ATOMIC_SEQ_CST); }
int csimhost_enabled(void) { return __atomic_load_n(&enabled, __ATOMIC_SEQ_CST); }

// Only Swift's own randomness (the standard library's generator, Foundation's UUIDs) drawn on
// the seeding thread comes from the seed's stream: a C library that seeds itself once per
// process (OpenSSL's generator) would draw from it in a process's first run only, and the runs
// after it would see other values than a run of the same seed alone.
enum library { library_other = 0, library_swift = 1, library_ssl = 2 };

static int library_of(const void *caller) {
    Dl_info info;
    if (!caller || !dladdr(caller, &info) || !info.dli_fname) return library_other;
    const char *name = strrchr(info.dli_fname, '/');
    name = name ? name + 1 : info.dli_fname;
    if (strncmp(name, "libswiftCore", 12) == 0 || strncmp(name, "libFoundation", 13) == 0) return library_swift;
    if (strncmp(name, "libssl", 6) == 0) return library_ssl;
    return library_other;
}

// dladdr walks every loaded library's symbols: a tenth of a sweep's time went to it, one call
// per random draw (a key drawn byte by byte asks thirty times). The few places that draw are
// remembered per thread, so each is looked up once.
enum { caller_cache_size = 16 };
static __thread const void *cached_callers[caller_cache_size];
static __thread signed char cached_answers[caller_cache_size];
static __thread unsigned cached_next;

static int library_of_caller(const void *caller) {
    for (unsigned i = 0; i < caller_cache_size; i++) {
        if (cached_callers[i] == caller && caller) return cached_answers[i];
    }
    int answer = library_of(caller);
    unsigned slot = cached_next++ % caller_cache_size;
    cached_callers[slot] = caller;
    cached_answers[slot] = (signed char)answer;
    return answer;
}

static int from_swift(const void *caller) { return library_of_caller(caller) == library_swift; }

static uint64_t next_from(int main_stream) {
    uint64_t *stream = main_stream && pthread_equal(pthread_self(), seeding_thread) ? &state : &other_state;
    uint64_t z = __atomic_add_fetch(stream, 0x9E3779B97F4A7C15ull, __ATOMIC_SEQ_CST);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill(void *buffer, size_t count, int main_stream) {
    unsigned char *bytes = buffer;
    while (count > 0) {
        uint64_t value = next_from(main_stream);
        for (int i = 0; i < 8 && count > 0; i++, count--) {
            *bytes++ = (unsigned char)(value & 0xff);
            value >>= 8;
        }
    }
}

ssize_t getrandom(void *buffer, size_t count, unsigned int flags) {
    if (csimhost_enabled()) {
        fill(buffer, count, from_swift(__builtin_return_address(0)));
        return (ssize_t)count;
    }
    static ssize_t (*real)(void *, size_t, unsigned int);
    if (!real) real = (ssize_t (*)(void *, size_t, unsigned int))dlsym(RTLD_NEXT, "getrandom");
    return real(buffer, count, flags);
}

void arc4random_buf(void *buffer, size_t count) {
    if (csimhost_enabled()) {
        fill(buffer, count, from_swift(__builtin_return_address(0)));
        return;
    }
    static void (*real)(void *, size_t);
    if (!real) real = (void (*)(void *, size_t))dlsym(RTLD_NEXT, "arc4random_buf");
    real(buffer, count);
}

uint32_t arc4random(void) {
    uint32_t value;
    arc4random_buf(&value, sizeof value);
    return value;
}

// Swift's runtime and Foundation ask the kernel directly: syscall(SYS_getrandom, ...).
long syscall(long number, ...) {
    va_list arguments;
    va_start(arguments, number);
    long a1 = va_arg(arguments, long), a2 = va_arg(arguments, long), a3 = va_arg(arguments, long);
    long a4 = va_arg(arguments, long), a5 = va_arg(arguments, long), a6 = va_arg(arguments, long);
    va_end(arguments);
    if (number == SYS_getrandom && csimhost_enabled()) {
        fill((void *)a1, (size_t)a2, from_swift(__builtin_return_address(0)));
        return a2;
    }
    static long (*real)(long, ...);
    if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(number, a1, a2, a3, a4, a5, a6);
}

// Foundation's UUID() reads /dev/urandom: each open gets a fresh in-memory file of seeded bytes.
static int seeded_file(int main_stream) {
    int descriptor = memfd_create("seeded-random", MFD_CLOEXEC);
    if (descriptor < 0) return descriptor;
    unsigned char bytes[4096];
    fill(bytes, sizeof bytes, main_stream);
    if (write(descriptor, bytes, sizeof bytes) != (ssize_t)sizeof bytes || lseek(descriptor, 0, SEEK_SET) != 0) {
        close(descriptor);
        return -1;
    }
    return descriptor;
}

static int is_urandom(const char *path) { return strcmp(path, "/dev/urandom") == 0 || strcmp(path, "/dev/random") == 0; }

// open and open64 alike: the seeded file for the random devices, else the C library's.
#define SEEDED_OPEN(name)                                                                            \
    int name(const char *path, int flags, ...) {                                                    \
        va_list arguments;                                                                          \
        va_start(arguments, flags);                                                                 \
        mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(arguments, int) : 0;         \
        va_end(arguments);                                                                          \
        if (csimhost_enabled() && is_urandom(path)) return seeded_file(from_swift(__builtin_return_address(0))); \
        static int (*real)(const char *, int, ...);                                                 \
        if (!real) real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name);                 \
        return real(path, flags, mode);                                                             \
    }

SEEDED_OPEN(open)
SEEDED_OPEN(open64)

// OpenSSL's DTLS retransmission timer reads the wall clock (gettimeofday, from libssl): in a run
// on manual time, a flight would be resent when the host happened to be slow, not when the run's
// time said so, and a loaded machine's run would differ from an idle one's. While a time is set,
// libssl reads it instead; everything else reads the real clock.
static int64_t simulated_ns = -1;

void csimhost_set_time(int64_t nanoseconds) { __atomic_store_n(&simulated_ns, nanoseconds, __ATOMIC_SEQ_CST); }

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    int64_t now = __atomic_load_n(&simulated_ns, __ATOMIC_SEQ_CST);
    if (now >= 0 && csimhost_enabled() && library_of_caller(__builtin_return_address(0)) == library_ssl) {
        tv->tv_sec = (time_t)(now / 1000000000);
        tv->tv_usec = (suseconds_t)((now % 1000000000) / 1000);
        return 0;
    }
    static int (*real)(struct timeval *, void *);
    if (!real) real = (int (*)(struct timeval *, void *))dlsym(RTLD_NEXT, "gettimeofday");
    return real(tv, tz);
}
