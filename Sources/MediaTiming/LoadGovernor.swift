/// Lowers Opus complexity for every call on a clock when its media threads run out of time,
/// and raises it back when they are calm again — as WebRTC's CPU-overuse detection adapts the
/// encoder — so that a loaded node sends slightly plainer audio instead of late frames.
///
/// The clock's lanes report each one-second window: the share of the window they spent ticking
/// (busy) and the share of their ticks that were behind (started more than a phase step late,
/// or finished after their frame period). A window over
/// ``overloadBusy`` busy, or with more than ``overloadLate`` late starts, takes the cap down by
/// ``stepDown`` (to ``minimum`` at most); ``calmWindows`` windows in a row under ``calmBusy``
/// with no tick behind raise it by one, up to 10. Pure state: tests drive it window by window.
///
/// Lateness counts only when the lane's own work could be its cause: a window whose thread ran
/// (on the processor, by its CPU time) less than ``ownWorkForLateness`` of it was late because
/// the host lent its processors to others — lower complexity would cost every call on the lane
/// its quality and buy no time — so it is neither overload nor calm.
///
/// Below the floor only in an emergency: when frames are still finishing after their period at
/// ``minimum`` (the machine cannot carry its calls even there), ``emergencyWindows`` such
/// windows take the cap to ``emergencyMinimum`` — plainer audio for everyone rather than late
/// frames, which each caller hears as a gap. Complexities 1–3 cost about what 4 does for much
/// worse speech, so the step is straight to 0, and calm brings it straight back to the floor.
public struct LoadGovernor: Sendable, Equatable {
    /// The highest complexity calls may use now (0–10).
    public private(set) var cap = 10
    /// The lowest complexity load takes calls to. Default 4: with 40 kbit/s speech PESQ-WB is
    /// 3.79 there against 4.12 at 8 (for 41 % less codec CPU), and falls off a cliff below
    /// (2.90 at 2, 2.81 at 0; BENCHMARKS.md, the encoder profile).
    public var minimum = 4
    /// Where frames still late at ``minimum`` take the cap (PESQ-WB 2.81 at 40 kbit/s, for
    /// 38 % less codec CPU than at 4). Set it to ``minimum`` to never go below the floor.
    public var emergencyMinimum = 0
    /// Windows at the floor with late frames (not counting overloaded windows whose frames
    /// were on time; any window that is not overloaded starts the count again).
    public static let emergencyWindows = 4
    public static let overloadBusy = 0.85
    public static let overloadLate = 0.01
    public static let calmBusy = 0.5
    /// Calm enough to go back from the emergency step to the floor: complexity 4 costs about
    /// 1.7 times what 0 does per leg (encoder and decoder), so a lane 40 % busy at 0 is ~70 %
    /// at 4, inside the overload line; at 50 % it would be on it, and the cap would swing.
    public static let calmBusyBelowFloor = 0.4
    /// The share of a window a lane's thread must have run for its late ticks to be its own
    /// doing. One Opus call at complexity 8 runs about 1 % of a window: on a host whose other
    /// processes keep both cores busy its ticks start late, and that is the host's doing.
    public static let ownWorkForLateness = 0.25
    public static let calmWindows = 5
    public static let stepDown = 2
    private var calm = 0
    private var lateAtFloor = 0

    public init(minimum: Int = 4, emergencyMinimum: Int = 0) {
        self.minimum = max(0, min(10, minimum))
        self.emergencyMinimum = max(0, min(self.minimum, emergencyMinimum))
    }

    /// One lane's window: how busy it was (0–1) and the share of its ticks that were behind
    /// (started more than a phase step late, or finished after their period). Returns the cap
    /// after it. Counts none of its frames as late (see ``window(busy:behind:lateFrames:)``).
    @discardableResult
    public mutating func window(busy: Double, late: Double) -> Int {
        window(busy: busy, behind: late, lateFrames: 0)
    }

    /// One lane's window: how busy it was (0–1, the wall time its ticks took), the share of its
    /// ticks that were behind, the share whose frames finished after their period (a subset of
    /// those behind), and the share of the window its thread ran (its CPU time; `nil`: all of
    /// the busy time).
    @discardableResult
    public mutating func window(busy: Double, behind: Double, lateFrames: Double, ownWork: Double? = nil) -> Int {
        let late = busy > Self.overloadBusy || behind > Self.overloadLate
        if late, (ownWork ?? busy) < Self.ownWorkForLateness {
            // The host's doing, not this lane's work: no step down, and no calm either.
            lateAtFloor = 0
            calm = 0
            return cap
        }
        if late {
            calm = 0
            if cap > minimum {
                cap = max(minimum, cap - Self.stepDown)
            } else if lateFrames > Self.overloadLate && cap > emergencyMinimum {
                lateAtFloor += 1
                if lateAtFloor >= Self.emergencyWindows {
                    cap = emergencyMinimum
                    lateAtFloor = 0
                }
            }
        } else if busy < (cap < minimum ? Self.calmBusyBelowFloor : Self.calmBusy) && behind == 0 {
            lateAtFloor = 0
            calm += 1
            if calm >= Self.calmWindows, cap < 10 {
                cap = cap < minimum ? minimum : cap + 1
                calm = 0
            }
        } else {
            lateAtFloor = 0
            calm = 0
        }
        return cap
    }
}
