import Synchronization

/// Something a ``MediaClock`` ticks once per frame period.
public protocol MediaClockClient: AnyObject, Sendable {
    /// One frame period has passed; `now` is the clock's time.
    func tick(now: Duration) async
}

/// Paces media for sources that have no hardware clock (files, tones, unpaced ALSA devices)
/// and for the send/receive cycle of every call: one clock can drive many calls.
///
/// Two kinds: real time (``run()`` sleeps on a `Clock` to each frame boundary, without drift)
/// and manual (``advance(frames:)`` steps time in tests, deterministically). Clients are
/// ticked in the order they were added.
public final class MediaClock: Sendable {
    public let frameDuration: Duration
    private let manual: Bool
    private let origin = ContinuousClock.now
    private let manualNow = Mutex(Duration.zero)
    private let clients = Mutex<[any MediaClockClient]>([])

    /// A clock that runs in real time once ``run()`` is called.
    public init(frameDuration: Duration = .milliseconds(20)) {
        self.frameDuration = frameDuration
        manual = false
    }

    private init(manualFrameDuration: Duration) {
        frameDuration = manualFrameDuration
        manual = true
    }

    /// A clock that only moves when ``advance(frames:)`` is called.
    public static func manual(frameDuration: Duration = .milliseconds(20)) -> MediaClock {
        MediaClock(manualFrameDuration: frameDuration)
    }

    /// Time since the clock was made (manual: the sum of all advances).
    public var now: Duration {
        manual ? manualNow.withLock { $0 } : ContinuousClock.now - origin
    }

    public func add(_ client: any MediaClockClient) {
        clients.withLock { $0.append(client) }
    }

    public func remove(_ client: any MediaClockClient) {
        clients.withLock { $0.removeAll { $0 === client } }
    }

    public var clientCount: Int { clients.withLock { $0.count } }

    private func tickAll() async {
        let now = self.now
        for client in clients.withLock({ $0 }) { await client.tick(now: now) }
    }

    /// Manual clocks: moves time forward `frames` periods, ticking every client each time.
    public func advance(frames: Int = 1) async {
        precondition(manual, "advance(frames:) is for manual clocks")
        for _ in 0..<frames {
            manualNow.withLock { $0 += frameDuration }
            await tickAll()
        }
    }

    /// Real-time clocks: ticks every frame period until the task is cancelled. Deadlines are
    /// absolute, so a late tick does not shift the ones after it; if ticks fall more than a
    /// few frames behind (the machine is overloaded), the schedule resets instead of bursting.
    ///
    /// - Returns: The number of ticks that started late by more than half a frame.
    @discardableResult
    public func run() async -> Int {
        precondition(!manual, "run() is for real-time clocks")
        let clock = ContinuousClock()
        var deadline = clock.now + frameDuration
        var late = 0
        while !Task.isCancelled {
            do { try await clock.sleep(until: deadline, tolerance: .milliseconds(1)) } catch { break }
            let lag = clock.now - deadline
            if lag > frameDuration / 2 { late += 1 }
            if lag > frameDuration * 5 { deadline = clock.now }
            await tickAll()
            deadline += frameDuration
        }
        return late
    }
}
