import CallNode
import CallNodeTestKit
import Foundation
import Locking
import Testing

/// Orders of events that nobody writes on purpose but a loaded machine produces, replayed on
/// whole in-memory nodes. A leg takes one input at a time, to completion: what happens while an
/// input is being performed (ICE connecting while the answer is still being taken) is the next
/// input, never a step inside the one before.
@Suite struct LegOrderTests {
    /// The order that lost the `ownership-study` example's audio in 4 of 12 runs on a loaded
    /// machine ("cannot apply mediaConnected to a call in offerSent", then 0 packets): the
    /// callee takes the caller's answer, starts ICE with it, and ICE reports connected before
    /// the callee has told its call manager the answer came. The leg used to take the ICE event
    /// in the middle of the answer (at one of its awaits), so media connected reached the
    /// manager before the answer did and was refused; the answer action was never fulfilled
    /// and the audio never started. Here the callee's ICE path reports connected inside
    /// `setRemote` and does not return until the leg has finished with that event.
    @Test func iceConnectingInsideTheAnswerStillCarriesAudioBothWays() async throws {
        let nodes = try InMemoryNodes()
        let network = nodes.network
        let connectedEarly = Locked(0)
        let alice = try await nodes.node("alice", input: .tone(440))
        let bob = try await nodes.node("bob", input: .tone(660)) { configuration in
            configuration.makeIcePath = { ice in
                EarlyConnectingPath(network.makePath(role: ice.role)) { connectedEarly.withLock { $0 += 1 } }
            }
        }
        try await nodes.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await nodes.waitFor("alice", advancing: true) { if case .connected = $0 { true } else { false } }
        try await nodes.waitFor("bob", advancing: true) { if case .connected = $0 { true } else { false } }
        for _ in 0..<100 { await nodes.step() }  // two seconds of the call

        #expect(connectedEarly.withLock { $0 } >= 1, "the callee's path never reported connected inside setRemote")
        let bobCall = try #require(await bob.liveCalls.first)
        let aliceHeard = try #require(await alice.statistics(call))
        let bobHeard = try #require(await bob.statistics(bobCall))
        #expect(aliceHeard.packetsReceived > 50, "alice: \(aliceHeard)")
        #expect(bobHeard.packetsReceived > 50, "bob: \(bobHeard)")
        #expect(aliceHeard.receiveLevel > -40, "alice hears bob at \(aliceHeard.receiveLevel) dB")
        #expect(bobHeard.receiveLevel > -40, "bob hears alice at \(bobHeard.receiveLevel) dB")
        let bobErrors = nodes.events("bob").compactMap { event -> String? in
            if case let .peerError(text) = event { text } else { nil }
        }
        #expect(bobErrors.isEmpty, "\(bobErrors)")
        try await alice.hangUp(call)
        try await nodes.waitFor("bob", advancing: true) { if case .ended = $0 { true } else { false } }
        await nodes.shutdown()
    }
}

/// An in-memory ICE path that, like libnice firing callbacks on the calling thread, reports
/// `connected` from inside the first `setRemote`, and returns from it only once its reader has
/// finished with that event (asked for the next one).
final class EarlyConnectingPath: IcePath, @unchecked Sendable {  // `reader` is used by the one task iterating `events`
    private let inner: InMemoryIcePath
    private let onEarly: @Sendable () -> Void
    private let merged: AsyncStream<(IceEvent, early: Bool)>
    private let mergedInput: AsyncStream<(IceEvent, early: Bool)>.Continuation
    private let forwarder: Task<Void, Never>
    private let waiting = Locked<(handedOut: Bool, done: CheckedContinuation<Void, Never>?, fired: Bool)>((false, nil, false))
    private var reader: AsyncStream<(IceEvent, early: Bool)>.Iterator
    private(set) var events = AsyncStream<IceEvent> { $0.finish() }

    init(_ inner: InMemoryIcePath, onEarly: @escaping @Sendable () -> Void) {
        self.inner = inner
        self.onEarly = onEarly
        (merged, mergedInput) = AsyncStream.makeStream(of: (IceEvent, early: Bool).self)
        let input = mergedInput, source = inner.events
        forwarder = Task {
            for await event in source { input.yield((event, false)) }
            input.finish()
        }
        reader = merged.makeAsyncIterator()
        let box = UnsafeBox(self)
        events = AsyncStream(unfolding: { await box.path?.next() })
    }

    deinit { forwarder.cancel() }

    /// The reader asks for its next event: if it had the early one, it has finished with it.
    private func next() async -> IceEvent? {
        let done = waiting.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.handedOut, let done = state.done else { return nil }
            state.done = nil
            return done
        }
        done?.resume()
        guard let (event, early) = await reader.next() else { return nil }
        if early { waiting.withLock { $0.handedOut = true } }
        return event
    }

    var datagrams: AsyncStream<IceDatagram> { inner.datagrams }
    var localCredentials: IceCredentials { get async { await inner.localCredentials } }
    var datagramPort: (any DatagramPort)? { inner.datagramPort }
    func gather() async throws(IceError) -> IceGathering { try await inner.gather() }
    func localCandidates() async throws(IceError) -> [IceCandidate] { try await inner.localCandidates() }
    func setRole(_ role: IceRole) async throws(IceError) { try await inner.setRole(role) }
    func addRemoteCandidates(_ candidates: [IceCandidate]) async throws(IceError) -> [IceError] {
        try await inner.addRemoteCandidates(candidates)
    }
    func endOfRemoteCandidates() async throws(IceError) { try await inner.endOfRemoteCandidates() }
    func send(_ bytes: [UInt8]) async throws(IceError) { try await inner.send(bytes) }
    func restart() async throws(IceError) -> IceGathering { try await inner.restart() }
    func close() async {
        await inner.close()
        mergedInput.finish()
    }

    func setRemote(_ remote: IceCredentials, candidates: [IceCandidate], endOfCandidates: Bool) async throws(IceError) -> [IceError] {
        let skipped = try await inner.setRemote(remote, candidates: candidates, endOfCandidates: endOfCandidates)
        let first = waiting.withLock { state -> Bool in
            defer { state.fired = true }
            return !state.fired
        }
        guard first else { return skipped }
        onEarly()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            waiting.withLock { $0.done = done }
            mergedInput.yield((.stateChanged(.connected), true))
        }
        return skipped
    }

    /// A weak way back from the unfolding closure (which the path owns) to the path.
    private final class UnsafeBox: @unchecked Sendable {  // only read, by the one reader task
        weak var path: EarlyConnectingPath?
        init(_ path: EarlyConnectingPath) { self.path = path }
    }
}
