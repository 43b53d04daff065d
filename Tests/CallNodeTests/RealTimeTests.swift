import CallNodeTestSupport
import Testing

/// Every test in this target runs real time on real sockets (TLS, libnice, SRTP, Opus paced by
/// the wall clock). Run side by side on two cores in a debug build they starve each other's
/// media clocks, so they run one at a time, each in its own suite nested here — and never
/// beside the ICE test that counts the process's threads and descriptors.
@Suite(.serialized, .exclusiveProcessResources) enum RealTimeTests {}
