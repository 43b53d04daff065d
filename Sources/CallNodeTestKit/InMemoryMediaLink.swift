import MediaTiming
import Locking
import Media

/// Two connected in-memory transport ends with loss, delay and jitter on a ``MediaClock``'s
/// time, driven by a seeded generator: the same seed gives the same losses, every run.
///
/// Datagrams without delay are delivered at once; delayed ones wait for a tick, so add the
/// link to the clock (*before* the calls that use it) when it has delay or jitter. Each end
/// keeps the link's state alive, so the ends alone are enough to carry a call.
public final class InMemoryMediaLink: MediaClockClient {
    public final class End: MediaTransport {
        fileprivate let core: Core
        fileprivate let index: Int
        fileprivate init(core: Core, index: Int) {
            self.core = core
            self.index = index
        }

        nonisolated(nonsending) public func send(_ datagram: [UInt8]) async { core.carry(datagram, from: index) }
        public func setReceiveHandler(_ handler: (@Sendable (UnsafeRawBufferPointer) -> Void)?) {
            core.handlers[index].set(handler)
        }
    }

    fileprivate struct State {
        var rng: UInt64
        var conditions: [LinkConditions] {
            didSet { for i in conditions.indices where conditions[i] != oldValue[i] { patterns[i] = Self.pattern(conditions[i], seed: rng &+ UInt64(i)) } }
        }
        /// Each direction's losses.
        var patterns: [LossPattern]
        var queue: [(due: Duration, order: Int, to: Int, bytes: [UInt8])] = []
        var order = 0
        var sent = [0, 0]
        var dropped = [0, 0]

        init(rng: UInt64, conditions: [LinkConditions]) {
            self.rng = rng
            self.conditions = conditions
            patterns = conditions.indices.map { Self.pattern(conditions[$0], seed: rng &+ UInt64($0)) }
        }

        static func pattern(_ conditions: LinkConditions, seed: UInt64) -> LossPattern {
            LossPattern(loss: conditions.loss, meanBurst: conditions.meanBurst, seed: seed)
        }
    }

    /// What both ends share: the conditions, the queue of delayed datagrams, the handlers.
    fileprivate final class Core: Sendable {
        let clock: MediaClock
        let state: Locked<State>
        let handlers: [Handler]

        /// The closure is boxed in a class: kept directly as `Locked`'s generic value, every
        /// read through `withLock` wrapped it in one more reabstraction thunk.
        final class Handler: Sendable {
            private final class Box: Sendable {
                let call: @Sendable (UnsafeRawBufferPointer) -> Void
                init(_ call: @escaping @Sendable (UnsafeRawBufferPointer) -> Void) { self.call = call }
            }
            private let handler = Locked<Box?>(nil)
            func set(_ call: (@Sendable (UnsafeRawBufferPointer) -> Void)?) { handler.withLock { $0 = call.map(Box.init) } }
            var current: (@Sendable (UnsafeRawBufferPointer) -> Void)? { handler.withLock { $0 }?.call }
        }

        init(clock: MediaClock, state: State) {
            self.clock = clock
            self.state = Locked(state)
            handlers = [Handler(), Handler()]
        }


        func carry(_ datagram: [UInt8], from index: Int) {
            let now = clock.now
            let deliverNow = state.withLock { s -> Bool in
                s.sent[index] += 1
                let c = s.conditions[index]
                // Random loss draws from the link's own generator (as it always has, so seeded
                // runs keep their patterns); bursty loss from the direction's Gilbert model.
                let dropped = c.meanBurst > 1 ? s.patterns[index].dropsNext()
                    : Double(splitMix64(&s.rng) % 1_000_000) / 1_000_000 < c.loss
                if dropped {
                    s.dropped[index] += 1
                    return false
                }
                var delay = c.delay
                if c.jitter > .zero {
                    let micros = c.jitter.components.seconds * 1_000_000 + c.jitter.components.attoseconds / 1_000_000_000_000
                    delay += .microseconds(Int64(splitMix64(&s.rng) % UInt64(max(1, micros))))
                }
                if delay == .zero { return true }
                s.order += 1
                s.queue.append((now + delay, s.order, 1 - index, datagram))
                return false
            }
            if deliverNow { deliver(datagram, to: 1 - index) }
        }

        func deliver(_ datagram: [UInt8], to index: Int) {
            guard let handler = handlers[index].current else { return }
            datagram.withUnsafeBytes(handler)
        }

        func deliverDue(at now: Duration) {
            let due = state.withLock { s -> [(Int, [UInt8])] in
                let ready = s.queue.filter { $0.due <= now }.sorted { ($0.due, $0.order) < ($1.due, $1.order) }
                s.queue.removeAll { $0.due <= now }
                return ready.map { ($0.to, $0.bytes) }
            }
            for (to, bytes) in due { deliver(bytes, to: to) }
        }
    }

    public let a: End
    public let b: End
    private let core: Core

    /// - Parameters:
    ///   - aToB: Conditions from `a` to `b`; `bToA` defaults to the same.
    public init(clock: MediaClock, aToB: LinkConditions = LinkConditions(), bToA: LinkConditions? = nil, seed: UInt64 = 1) {
        core = Core(clock: clock, state: State(rng: seed, conditions: [aToB, bToA ?? aToB]))
        a = End(core: core, index: 0)
        b = End(core: core, index: 1)
    }

    /// Changes the conditions of one direction from now on.
    public func setConditions(_ conditions: LinkConditions, fromA: Bool) {
        core.state.withLock { $0.conditions[fromA ? 0 : 1] = conditions }
    }

    /// Datagrams sent and dropped from `a` (index 0) and `b` (index 1).
    public var counts: (sent: [Int], dropped: [Int]) { core.state.withLock { ($0.sent, $0.dropped) } }

    public func tick(now: Duration) async { core.deliverDue(at: now) }
}

/// SplitMix64: the link's seeded generator (the same seed, the same losses).
private func splitMix64(_ s: inout UInt64) -> UInt64 {
    s &+= 0x9E37_79B9_7F4A_7C15
    var z = s
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
}
