/// The one clock the node's timers run on, type-erased, measured as offsets from when it was
/// wrapped: leg timers, the call manager's timeouts, ICE's connect timeout, DTLS's handshake,
/// the relay client's keep-alives and the host-name resolver's lookups.
///
/// Actors that arm timeouts hold one of these instead of being generic over their clock:
/// `TimerClock(.continuous)` in production, `TimerClock(manualClock)` in tests. Deadlines are
/// computed when a timer is armed, so a manual clock advanced before the sleeping task starts
/// still fires it.
public struct TimerClock: Sendable {
    private let nowOffset: @Sendable () -> Duration
    private let sleepUntil: @Sendable (Duration) async throws -> Void

    public init<C: Clock>(_ clock: C) where C.Duration == Duration, C: Sendable {
        let origin = clock.now
        nowOffset = { origin.duration(to: clock.now) }
        sleepUntil = { offset in try await clock.sleep(until: origin.advanced(by: offset), tolerance: nil) }
    }

    /// The real continuous clock.
    public static var continuous: TimerClock { TimerClock(ContinuousClock()) }

    /// Time since this clock was wrapped.
    public var now: Duration { nowOffset() }

    /// Sleeps until `deadline` (an offset from ``now``'s origin). Throws on cancellation.
    public func sleep(until deadline: Duration) async throws { try await sleepUntil(deadline) }

    /// Sleeps for `duration` from now. Throws on cancellation.
    public func sleep(for duration: Duration) async throws { try await sleepUntil(nowOffset() + duration) }
}
