import CallNodeTestKit
import CallNodeTestSupport
import Clocks
import Foundation
@_spi(Testing) import ICE
import Testing

/// Real libnice agents on loopback, one test at a time. The hygiene test counts the process's
/// file descriptors and threads, which anything else running would disturb: it alone holds
/// ``TestLock/processResources`` exclusively; the others share it with the real-time suites
/// and the network beds.
@Suite(.serialized, .sharedProcessResources) struct IceAgentTests {
    static func configuration(_ role: IceRole, _ edit: (inout IceConfiguration) -> Void = { _ in }) -> IceConfiguration {
        var c = IceConfiguration(role: role)
        c.localAddresses = ["127.0.0.1"]
        c.connectTimeout = .seconds(15)
        edit(&c)
        return c
    }

    struct Pair {
        let a: IceAgent, b: IceAgent
        let eventsA: EventRecorder, eventsB: EventRecorder

        func close() async {
            await a.close()
            await b.close()
        }
    }

    /// Two agents, linked in-process; returns once both report `connected`.
    static func connectedPair(_ configA: IceConfiguration, _ configB: IceConfiguration) async throws -> Pair {
        let a = try await IceAgent(configuration: configA)
        let b = try await IceAgent(configuration: configB)
        let pair = Pair(a: a, b: b, eventsA: EventRecorder(a), eventsB: EventRecorder(b))
        do {
            try await IceAgent.link(a, b)
            guard await pair.eventsA.wait(for: .connected) != nil, await pair.eventsB.wait(for: .connected) != nil else {
                throw TestFailure("agents did not connect: a \(pair.eventsA.states), b \(pair.eventsB.states)")
            }
        } catch {
            await pair.close()
            throw error
        }
        return pair
    }

    /// Sends `count` numbered datagrams from `sender`, keeping at most `window` unacknowledged
    /// by the receiver's count, so the test measures ICE and not socket-buffer overflow.
    static func send(_ count: Int, from sender: IceAgent, to receiver: DatagramCollector, tag: UInt8, window: Int = 64) async throws {
        for i in 0..<count {
            if i >= window, !(await receiver.wait(count: i - window + 1, limit: .seconds(10))) {
                throw TestFailure("receiver stalled at \(receiver.count) of \(i) sent")
            }
            let n = UInt32(i)
            try await sender.send([tag, UInt8(n >> 24), UInt8((n >> 16) & 0xFF), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)] + Array(repeating: 0xA5, count: 155))
        }
    }

    static func sequenceNumbers(_ datagrams: [[UInt8]], tag: UInt8) -> Set<Int> {
        Set(datagrams.filter { $0.first == tag && $0.count == 160 }.map {
            Int($0[1]) << 24 | Int($0[2]) << 16 | Int($0[3]) << 8 | Int($0[4])
        })
    }

    static func sameEndpoint(_ x: IceCandidate, _ y: IceCandidate) -> Bool {
        x.address == y.address && x.port == y.port && x.transport == y.transport
    }

    @Test("two agents connect with either side controlling and exchange 1 000 datagrams each way",
          arguments: [IceRole.controlling, .controlled])
    func connectAndExchange(roleOfA: IceRole) async throws {
        let other: IceRole = roleOfA == .controlling ? .controlled : .controlling
        let pair = try await Self.connectedPair(Self.configuration(roleOfA), Self.configuration(other))
        let inboxA = DatagramCollector(pair.a), inboxB = DatagramCollector(pair.b)

        async let aToB: Void = Self.send(1000, from: pair.a, to: inboxB, tag: 0xA)
        async let bToA: Void = Self.send(1000, from: pair.b, to: inboxA, tag: 0xB)
        try await aToB
        try await bToA
        #expect(await inboxB.wait(count: 1000))
        #expect(await inboxA.wait(count: 1000))
        #expect(Self.sequenceNumbers(inboxB.received, tag: 0xA) == Set(0..<1000))
        #expect(Self.sequenceNumbers(inboxA.received, tag: 0xB) == Set(0..<1000))

        let selectedA = try #require(await pair.a.selectedPair)
        let selectedB = try #require(await pair.b.selectedPair)
        #expect(Self.sameEndpoint(selectedA.local, selectedB.remote), "a \(selectedA) / b \(selectedB)")
        #expect(Self.sameEndpoint(selectedA.remote, selectedB.local), "a \(selectedA) / b \(selectedB)")
        #expect(pair.eventsA.events.contains(.selectedPair(selectedA)))
        #expect(pair.eventsA.states.first == .gathering)
        #expect(pair.eventsA.states.contains(.checking))

        await pair.close()
        #expect(await pair.eventsA.wait(for: .closed) != nil)
        #expect(await pair.a.state == .closed)
        await #expect(throws: IceError.closed) { try await pair.a.send([1]) }
    }

    @Test func trickledCandidatesAddedAfterChecksStartedStillConnect() async throws {
        let a = try await IceAgent(configuration: Self.configuration(.controlling))
        let b = try await IceAgent(configuration: Self.configuration(.controlled))
        let eventsA = EventRecorder(a), eventsB = EventRecorder(b)
        let gA = try await a.gather(), gB = try await b.gather()
        var candidatesA: [IceCandidate] = [], candidatesB: [IceCandidate] = []
        for await c in gA.candidates { candidatesA.append(c) }
        for await c in gB.candidates { candidatesB.append(c) }
        #expect(!candidatesA.isEmpty && !candidatesB.isEmpty)

        // A dead candidate first: a starts checking before any real candidate is known.
        try await a.setRemoteCredentials(gB.credentials)
        try await a.addRemoteCandidate(IceCandidate(foundation: "99", priority: 100, address: "127.0.0.1", port: 9, type: .host))
        #expect(await eventsA.wait(for: .checking) != nil)
        #expect(eventsA.states.contains(.connected) == false)

        // Candidates given to b before its credentials are kept until they arrive.
        for c in candidatesA { try await b.addRemoteCandidate(c) }
        try await b.setRemoteCredentials(gA.credentials)
        for c in candidatesB { try await a.addRemoteCandidate(c) }
        try await a.endOfRemoteCandidates()
        try await b.endOfRemoteCandidates()

        #expect(await eventsA.wait(for: .connected) != nil, "a: \(eventsA.states)")
        #expect(await eventsB.wait(for: .connected) != nil, "b: \(eventsB.states)")
        let inbox = DatagramCollector(b)
        try await a.send(Array("after trickle".utf8))
        #expect(await inbox.wait(count: 1))
        #expect(inbox.received.first == Array("after trickle".utf8))
        await a.close()
        await b.close()
    }

    @Test("relay-only agents connect through coturn", arguments: [TurnServer.Transport.udp, .tcp])
    func turnRelay(transport: TurnServer.Transport) async throws {
        let turn = try await Coturn()
        defer { turn.stop() }
        let config: (IceRole) -> IceConfiguration = { role in
            Self.configuration(role) {
                $0.turnServers = [turn.turnServer(transport)]
                $0.relayOnly = true
            }
        }
        let a = try await IceAgent(configuration: config(.controlling))
        let gathering = try await a.gather()
        var gathered: [IceCandidate] = []
        for await c in gathering.candidates { gathered.append(c) }
        #expect(!gathered.isEmpty)
        #expect(gathered.allSatisfy { $0.type == .relay }, "\(gathered)")
        await a.close()

        let pair = try await Self.connectedPair(config(.controlling), config(.controlled))
        let selected = try #require(await pair.a.selectedPair)
        #expect(selected.local.type == .relay, "\(selected)")
        let inbox = DatagramCollector(pair.b)
        try await Self.send(50, from: pair.a, to: inbox, tag: 0xC, window: 16)
        #expect(await inbox.wait(count: 50))
        #expect(Self.sequenceNumbers(inbox.received, tag: 0xC) == Set(0..<50))
        await pair.close()
    }

    @Test func stunServerGivesServerReflexiveCandidates() async throws {
        let stun = try await Coturn()
        defer { stun.stop() }
        let nat = try LoopbackSourceNAT(stunPort: stun.port, mappedAddress: "127.0.0.5")
        defer { nat.remove() }
        let agent = try await IceAgent(configuration: Self.configuration(.controlling) { $0.stunServer = stun.address })
        let gathering = try await agent.gather()
        var gathered: [IceCandidate] = []
        for await c in gathering.candidates { gathered.append(c) }
        await agent.close()
        let host = try #require(gathered.first { $0.type == .host })
        let reflexive = try #require(gathered.first { $0.type == .serverReflexive }, "no srflx in \(gathered)")
        #expect(reflexive.address == "127.0.0.5")
        #expect(reflexive.relatedAddress == host.address)
        #expect(reflexive.relatedPort == host.port)
    }

    @Test func anAgentMadeAheadTakesEitherRoleAndConnectsInOneStep() async throws {
        // Both made controlling, as a pool makes them; one takes the controlled side.
        let a = try await IceAgent(configuration: Self.configuration(.controlling))
        let b = try await IceAgent(configuration: Self.configuration(.controlling))
        let eventsA = EventRecorder(a), eventsB = EventRecorder(b)
        try await b.setRole(.controlled)
        #expect(await b.role == .controlled)
        #expect(try await b.libniceRole() == .controlled)
        #expect(try await a.libniceRole() == .controlling)

        let gA = try await a.gather(), gB = try await b.gather()
        var candidatesA: [IceCandidate] = [], candidatesB: [IceCandidate] = []
        for await c in gA.candidates { candidatesA.append(c) }
        for await c in gB.candidates { candidatesB.append(c) }
        // Credentials, candidates and end-of-candidates in one call each; an unusable
        // candidate is returned, not fatal.
        let odd = IceCandidate(foundation: "7", component: 2, priority: 1, address: "127.0.0.1", port: 9, type: .host)
        let skippedB = try await b.setRemote(gA.credentials, candidates: candidatesA + [odd], endOfCandidates: true)
        #expect(skippedB.count == 1)
        #expect(try await a.setRemote(gB.credentials, candidates: candidatesB, endOfCandidates: true).isEmpty)
        #expect(await eventsA.wait(for: .connected) != nil, "a: \(eventsA.states)")
        #expect(await eventsB.wait(for: .connected) != nil, "b: \(eventsB.states)")

        // The role is fixed once the agent has gathered.
        await #expect(throws: IceError.invalidConfiguration("the ICE role can only change before gathering (this agent gathered as controlled)")) {
            try await b.setRole(.controlling)
        }
        #expect(try await b.libniceRole() == .controlled)
        // Malformed credentials are refused before anything reaches libnice.
        let c = try await IceAgent(configuration: Self.configuration(.controlled))
        await #expect(throws: IceError.self) {
            try await c.setRemote(IceCredentials(ufrag: "x", pwd: "short"), candidates: candidatesA, endOfCandidates: false)
        }
        await c.close()

        let inbox = DatagramCollector(a)
        try await b.send(Array("taken from a pool".utf8))
        #expect(await inbox.wait(count: 1))
        #expect(inbox.received.first == Array("taken from a pool".utf8))
        await a.close()
        await b.close()
    }

    @Test func restartAfterConnectingReconnects() async throws {
        let pair = try await Self.connectedPair(Self.configuration(.controlling), Self.configuration(.controlled))
        let inboxB = DatagramCollector(pair.b)
        try await pair.a.send([1])
        #expect(await inboxB.wait(count: 1))
        let before = await pair.a.localCredentials
        let markA = pair.eventsA.count, markB = pair.eventsB.count

        try await IceAgent.link(pair.a, pair.b, restart: true)
        #expect(await pair.a.localCredentials != before)
        #expect(await pair.eventsA.wait(for: .connected, after: markA) != nil, "a: \(pair.eventsA.states)")
        #expect(await pair.eventsB.wait(for: .connected, after: markB) != nil, "b: \(pair.eventsB.states)")
        #expect(Array(pair.eventsA.states.suffix(from: 0)).contains(.gathering))

        let inboxA = DatagramCollector(pair.a)
        try await Self.send(20, from: pair.b, to: inboxA, tag: 0xD, window: 8)
        try await pair.a.send([2])
        #expect(await inboxA.wait(count: 20))
        #expect(await inboxB.wait(count: 2))
        await pair.close()
    }

    @Test func candidatesThatLeadNowhereEndInFailed() async throws {
        let agent = try await IceAgent(configuration: Self.configuration(.controlling) { $0.connectTimeout = .seconds(3) })
        let events = EventRecorder(agent)
        _ = try await agent.gather()
        try await agent.setRemoteCredentials(IceCredentials(ufrag: "nowh", pwd: "nowherenowherenowhere0"))
        try await agent.addRemoteCandidates([
            IceCandidate(foundation: "1", priority: 2_130_706_431, address: "127.0.0.1", port: 9, type: .host),
            IceCandidate(foundation: "2", priority: 2_130_706_430, address: "127.0.0.1", port: 1, type: .host),
        ])
        try await agent.endOfRemoteCandidates()
        #expect(await events.wait(for: .failed, limit: .seconds(30)) != nil, "\(events.states)")
        #expect(await agent.state == .failed)
        await #expect(throws: IceError.notConnected(.failed)) { try await agent.send([1]) }
        await agent.close()
    }

    @Test func connectTimeoutRunsOnTheInjectedClock() async throws {
        let clock = ManualClock()
        let agent = try await IceAgent(configuration: Self.configuration(.controlling) {
            $0.connectTimeout = .seconds(30)
            $0.clock = TimerClock(clock)
        })
        let events = EventRecorder(agent)
        _ = try await agent.gather()
        try await agent.setRemoteCredentials(IceCredentials(ufrag: "nowh", pwd: "nowherenowherenowhere0"))
        // No end-of-candidates: libnice keeps waiting for more, so only the timer can fail it.
        try await agent.addRemoteCandidate(IceCandidate(foundation: "1", priority: 1, address: "127.0.0.1", port: 9, type: .host))
        await clock.waitForSleepers(1)
        clock.advance(by: .seconds(29))
        #expect(await agent.state != .failed)
        clock.advance(by: .seconds(1))
        #expect(await events.wait(for: .failed) != nil, "\(events.states)")
        #expect(events.states.filter { $0 == .failed }.count == 1)
        await agent.close()
    }

    @Test func unusableInputIsRejectedWithTypedErrors() async throws {
        await #expect(throws: IceError.invalidConfiguration("relay-only needs at least one TURN server")) {
            _ = try await IceAgent(configuration: Self.configuration(.controlling) { $0.relayOnly = true })
        }
        await #expect(throws: IceError.invalidConfiguration("local address 'eth0' is not an IP address")) {
            _ = try await IceAgent(configuration: Self.configuration(.controlling) { $0.localAddresses = ["eth0"] })
        }
        // A STUN or TURN server whose name does not resolve is left out (with a warning), not
        // fatal: the agent gathers its host candidates without it (a sample config's
        // turn.example.org used to fail every call).
        let unresolved = try await IceAgent(configuration: Self.configuration(.controlling) {
            $0.stunServer = IceServerAddress(host: "no-such-host.invalid", port: 3478)
            $0.turnServers = [TurnServer(address: IceServerAddress(host: "turn.no-such-host.invalid", port: 3478), username: "u", password: "p")]
        })
        var gathered: [IceCandidate] = []
        for await candidate in try await unresolved.gather().candidates { gathered.append(candidate) }
        #expect(gathered.contains { $0.type == .host } && !gathered.contains { $0.type == .relay }, "\(gathered)")
        await unresolved.close()
        let agent = try await IceAgent(configuration: Self.configuration(.controlling))
        await #expect(throws: IceError.notConnected(.new)) { try await agent.send([1]) }
        let rtcp = IceCandidate(foundation: "1", component: 2, priority: 1, address: "127.0.0.1", port: 9, type: .host)
        await #expect(throws: IceError.self) { try await agent.addRemoteCandidate(rtcp) }
        let mdns = IceCandidate(foundation: "1", priority: 1, address: "abc.local", port: 9, type: .host)
        let skipped = try await agent.addRemoteCandidates([mdns, rtcp])
        #expect(skipped.count == 2)
        await #expect(throws: IceError.self) {
            try await agent.setRemoteCredentials(IceCredentials(ufrag: "x", pwd: "short"))
        }
        _ = try await agent.gather()
        await #expect(throws: IceError.self) { _ = try await agent.gather() }
        await agent.close()
        await agent.close()  // idempotent
    }

    @Test(.exclusiveProcessResources) func hundredAgentsLeaveNoFileDescriptorsOrThreadsBehind() async throws {
        // Warm up once: GLib and the test runtime create process-wide state on first use.
        try await Self.connectedPair(Self.configuration(.controlling), Self.configuration(.controlled)).close()
        let before = ProcessResourceCounts.current()

        for _ in 0..<50 {
            let pair = try await Self.connectedPair(Self.configuration(.controlling), Self.configuration(.controlled))
            try await pair.a.send([7])
            await pair.close()
        }

        // Threads end right after close() joins them; give stragglers of the runtime a bounded
        // moment, then compare.
        var after = ProcessResourceCounts.current()
        let deadline = ContinuousClock.now + .seconds(5)
        while (after.fileDescriptors > before.fileDescriptors || after.threads > before.threads) && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            after = ProcessResourceCounts.current()
        }
        #expect(after.fileDescriptors <= before.fileDescriptors, "before: \(before), after 100 agents: \(after)")
        #expect(after.threads <= before.threads, "before: \(before), after 100 agents: \(after)")
    }
}

/// RFC 7675 consent, between real agents: browsers send consent checks on the selected pair
/// every few seconds and give the pair up when they go unanswered.
extension IceAgentTests {
    @Test func consentChecksFromThePeerAreAnsweredSoItsPairStaysUp() async throws {
        // A sends consent checks (as a browser does); B, a node's default agent, only answers.
        let pair = try await Self.connectedPair(Self.configuration(.controlling) { $0.consentFreshness = true },
                                                Self.configuration(.controlled))
        let inboxA = DatagramCollector(pair.a), inboxB = DatagramCollector(pair.b)
        // Past two consent rounds (4–6 s apart each): an unanswered one would fail A's pair.
        let deadline = ContinuousClock.now + .seconds(13)
        var sent = 0
        while ContinuousClock.now < deadline {
            try await pair.a.send([0xA, UInt8(sent & 0xFF)])
            try await pair.b.send([0xB, UInt8(sent & 0xFF)])
            sent += 1
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(!pair.eventsA.states.contains(.failed) && !pair.eventsA.states.contains(.disconnected), "A: \(pair.eventsA.states)")
        #expect(await pair.a.state == .connected)
        let toB = await inboxB.wait(count: sent - 5), toA = await inboxA.wait(count: sent - 5)
        #expect(toB && toA, "datagrams flow both ways all along")
        // The check can tell: once B stops answering (gone), A gives the pair up.
        await pair.b.close()
        let gaveUp = ContinuousClock.now
        let lost = await pair.eventsA.wait(for: .failed, limit: .seconds(20))
        #expect(lost != nil, "A kept a pair nobody answered on: \(pair.eventsA.states)")
        print("consent: A gave the pair up \(ContinuousClock.now - gaveUp) after B stopped answering")
        await pair.close()
    }
}
