/// Lowers Opus complexity for every call on a clock when its media threads run out of time,
/// and raises it back when they are calm again — as WebRTC's CPU-overuse detection adapts the
/// encoder — so that a loaded node sends slightly plainer audio instead of late frames.
///
/// The clock's lanes report each one-second window: the share of the window they spent ticking
/// (busy) and the share of their ticks that were behind (started more than a phase step late,
/// or finished after their frame period). A window over
/// ``overloadBusy`` busy, or with more than ``overloadLate`` late starts, takes the cap down by
/// ``stepDown`` (to ``minimum`` at most); ``calmWindows`` windows in a row under ``calmBusy``
/// with no tick behind raise it by one, up to 10. A cap change waits for the next window, so one
/// overloaded second does not count twice. Pure state: tests drive it window by window.
public struct LoadGovernor: Sendable, Equatable {
    /// The highest complexity calls may use now (0–10).
    public private(set) var cap = 10
    /// The lowest complexity load takes calls to. Default 4: with 40 kbit/s speech PESQ-WB is
    /// 3.79 there against 4.12 at 8 (for 41 % less codec CPU), and falls off a cliff below
    /// (2.90 at 2, 2.81 at 0; BENCHMARKS.md, the encoder profile).
    public var minimum = 4
    public static let overloadBusy = 0.85
    public static let overloadLate = 0.01
    public static let calmBusy = 0.5
    public static let calmWindows = 5
    public static let stepDown = 2
    private var calm = 0

    public init(minimum: Int = 4) {
        self.minimum = max(0, min(10, minimum))
    }

    /// One lane's window: how busy it was (0–1) and the share of its ticks that started late.
    /// Returns the cap after it.
    @discardableResult
    public mutating func window(busy: Double, late: Double) -> Int {
        if busy > Self.overloadBusy || late > Self.overloadLate {
            calm = 0
            cap = max(minimum, cap - Self.stepDown)
        } else if busy < Self.calmBusy && late == 0 {
            calm += 1
            if calm >= Self.calmWindows, cap < 10 {
                cap += 1
                calm = 0
            }
        } else {
            calm = 0
        }
        return cap
    }
}
