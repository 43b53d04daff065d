import CallNodeTestSupport
import Testing

/// Every test in this target runs real time on real sockets (TLS, libnice, SRTP, Opus paced by
/// the wall clock). Run side by side without bound on two cores in a debug build they starve
/// each other's media clocks, so each suite nested here runs its tests one at a time, and at
/// most two suites run at once (``RealTimeLaneTrait``; the heaviest run alone); never beside a
/// test that counts the process's threads and descriptors.
@Suite(.realTimeLanes) enum RealTimeTests {}
