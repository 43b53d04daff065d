import CallNodeTestKit
import Foundation
import ICE
import Locking
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A polled port: while the path is connected, datagrams wait in the socket for the media
/// tick's `poll()` and are handed over on the polling thread, so libnice's thread does not wake
/// for each; not polled, they arrive on libnice's thread as before. The agent keeps working
/// through it (its jobs run in `poll()`), and closes while polled.
@Suite struct PolledPortTests {
    /// Counts datagrams and the threads they were handed over on.
    final class Arrivals: Sendable {
        private let state = Locked((count: 0, threads: Set<UInt>()))
        func note() {
            let thread = PolledPortTests.thisThread
            state.withLock { s in
                s.count += 1
                s.threads.insert(thread)
            }
        }
        var count: Int { state.withLock { $0.count } }
        var threads: Set<UInt> { state.withLock { $0.threads } }
    }

    static var thisThread: UInt { UInt(pthread_self()) }

    /// Two connected agents, the second's port polled and counting what arrives.
    struct PolledPair {
        let a: IceAgent, b: IceAgent
        let sender: any DatagramPort, receiver: any DatagramPort
        let arrivals = Arrivals()
        /// Arrivals before the test's own datagrams.
        var before = 0

        init() async throws {
            (a, b) = try await LoopbackAgents.connectedPair()
            sender = try #require(a.datagramPort)
            receiver = try #require(b.datagramPort)
            let arrivals = self.arrivals
            receiver.setReceiver { _ in arrivals.note() }
            receiver.setPolled(true)
            // The first poll lends the loop; libnice's thread lets go of it once it wakes.
            receiver.poll()
            try await Task.sleep(for: .milliseconds(50))
            before = arrivals.count
        }

        func close() async {
            receiver.setReceiver(nil)
            await a.close()
            await b.close()
        }
    }

    @Test func datagramsWaitForPollAndArriveOnThePollingThread() async throws {
        let pair = try await PolledPair()
        let (b, sender, receiver, arrivals, before) = (pair.b, pair.sender, pair.receiver, pair.arrivals, pair.before)

        // Polled: sent datagrams wait in the socket until a poll reads them.
        for _ in 0..<20 { sender.send([0x80, 0, 0, 1]) }
        try await Task.sleep(for: .milliseconds(200))
        #expect(arrivals.count == before, "\(arrivals.count - before) datagrams arrived without a poll")
        let pollingThread = await Self.onOneThread { receiver.poll() }
        #expect(arrivals.count == before + 20)
        #expect(arrivals.threads.contains(pollingThread))

        // The agent's own work runs in polls meanwhile: a job queued to its loop completes.
        let listed = Locked<[IceCandidate]?>(nil)
        let job = Task {
            let found = try await b.localCandidates()
            listed.withLock { $0 = found }
        }
        var polls = 0
        while listed.withLock({ $0 }) == nil && polls < 200 {
            receiver.poll()
            try await Task.sleep(for: .milliseconds(10))
            polls += 1
        }
        _ = try await job.value
        #expect(!(listed.withLock { $0 } ?? []).isEmpty, "the agent's job did not run in \(polls) polls")

        // Not polled: libnice's thread hands them over as they arrive.
        receiver.setPolled(false)
        let unpolled = arrivals.count
        for _ in 0..<20 { sender.send([0x80, 0, 0, 1]) }
        let deadline = ContinuousClock.now + .seconds(10)
        while arrivals.count < unpolled + 20 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(arrivals.count == unpolled + 20)
        await pair.close()
    }

    /// What piles up between two ticks (a burst, or the backlog after the process was paused)
    /// is all read by the next polls, none left behind by the bound on one poll's work.
    @Test func aBurstBetweenTwoPollsIsReadWhole() async throws {
        let pair = try await PolledPair()
        let (sender, receiver, arrivals, before) = (pair.sender, pair.receiver, pair.arrivals, pair.before)
        // 100 datagrams at once, as many as 2 s of a call's packets.
        for _ in 0..<100 { sender.send([0x80, 0, 0, 1]) }
        try await Task.sleep(for: .milliseconds(100))
        var polls = 0
        while arrivals.count < before + 100 && polls < 10 {
            receiver.poll()
            polls += 1
        }
        #expect(arrivals.count == before + 100, "\(arrivals.count - before) of 100 read in \(polls) polls")
        #expect(polls <= 2, "\(polls) polls to read a burst of 100")
        await pair.close()
    }

    @Test func anAgentClosesWhilePolled() async throws {
        let (a, b) = try await LoopbackAgents.connectedPair()
        let receiver = try #require(b.datagramPort)
        receiver.setPolled(true)
        for _ in 0..<5 {
            receiver.poll()
            try await Task.sleep(for: .milliseconds(10))
        }
        // Nobody polls any more: closing must not wait for a poll.
        await b.close()
        await a.close()
        #expect(await b.state == .closed)
    }

    /// Runs `body` on a thread of its own and returns that thread's ID.
    static func onOneThread(_ body: @escaping @Sendable () -> Void) async -> UInt {
        await withCheckedContinuation { continuation in
            let thread = Thread {
                body()
                continuation.resume(returning: thisThread)
            }
            thread.start()
        }
    }
}
