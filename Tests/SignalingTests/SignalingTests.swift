import CallNodeTestSupport
import CallCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOEmbedded
import NIOPosix
import SDP
import Testing
@_spi(Fuzzing) @testable import Signaling

@Suite struct IdentityTests {
    @Test func fingerprintParsesHexAndColonForms() throws {
        let identity = try NodeIdentity.generate()
        let hex = identity.fingerprint.hex
        #expect(hex.count == 64)
        #expect(Fingerprint(hex) == identity.fingerprint)
        let colons = stride(from: 0, to: 64, by: 2).map { i -> String in
            let start = hex.index(hex.startIndex, offsetBy: i)
            return hex[start..<hex.index(start, offsetBy: 2)].uppercased()
        }.joined(separator: ":")
        #expect(Fingerprint(colons) == identity.fingerprint)
        #expect(Fingerprint("zz" + hex.dropFirst(2)) == nil)
        #expect(Fingerprint(String(hex.dropLast())) == nil)
        #expect(Fingerprint(certificateDER: identity.certificateDER) == identity.fingerprint)
    }

    @Test func identityIsCreatedOnceAndReloaded() throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-id-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: home) }
        let (first, created) = try NodeIdentity.loadOrCreate(home: home)
        #expect(created)
        let (second, createdAgain) = try NodeIdentity.loadOrCreate(home: home)
        #expect(!createdAgain)
        #expect(second.fingerprint == first.fingerprint)
        let mode = try FileManager.default.attributesOfItem(atPath: home + "/identity.key")[.posixPermissions] as? Int
        #expect(mode == 0o600)
        // A damaged key file is reported, not replaced.
        try "garbage".write(toFile: home + "/identity.key", atomically: true, encoding: .utf8)
        #expect(throws: IdentityError.self) { try NodeIdentity.loadOrCreate(home: home) }
    }
}

@Suite struct EnvelopeTests {
    static let call = UUID()
    static let messages: [SignalMessage] = [
        .invite(Invitation(displayName: "alice", title: "standup")), .ringing, .offer(sdp: "v=0\r\n"), .answer(sdp: "v=0\r\n"),
        .candidates(["candidate:1 1 UDP 2130706431 127.0.0.1 5000 typ host"], end: false), .candidates([], end: true),
        .hold(true), .hold(false), .end(.hangup), .reject(.unknownCaller), .reject(.doNotDisturb), .error("bad"), .keepAlive,
        .pathFound(FoundPath(ufrag: "abcd", local: TransportAddress(address: "100.64.2.2", port: 40_000),
                             remote: TransportAddress(address: "fe80::1", port: 9))),
    ]

    @Test(arguments: messages) func roundTrips(_ message: SignalMessage) throws {
        let envelope = SignalEnvelope(call: Self.call, message)
        #expect(try SignalEnvelope.decode(envelope.encoded()) == envelope)
    }

    /// The pair a side found travels as a `candidates` message with none and a `path`: a node
    /// that does not know `path` reads an empty trickle, not a malformed frame.
    @Test func aFoundPathReadsAsNoCandidatesWithoutItsPath() throws {
        let path = FoundPath(ufrag: "abcd", local: TransportAddress(address: "100.64.2.2", port: 40_000),
                             remote: TransportAddress(address: "100.64.1.2", port: 50_000))
        let wire = SignalEnvelope(call: Self.call, .pathFound(path)).encoded()
        var object = try #require(try JSONSerialization.jsonObject(with: Data(wire)) as? [String: Any])
        #expect(object["type"] as? String == "candidates")
        #expect((object["candidates"] as? [String])?.isEmpty == true)
        object["path"] = nil
        let older = try JSONSerialization.data(withJSONObject: object)
        #expect(try SignalEnvelope.decode(Array(older)).message == .candidates([], end: false))
    }

    @Test func malformedBodiesAreTypedErrors() {
        let cases: [(String, String)] = [
            ("not json", "not a JSON envelope"),
            (#"{"v":1,"type":"teleport"}"#, "unknown message type 'teleport'"),
            (#"{"v":1,"type":"offer"}"#, "missing field 'sdp'"),
            (#"{"v":1,"type":"hold","hold":"yes"}"#, "wrong type at 'hold'"),
            (#"{"type":"ringing"}"#, "missing field 'v'"),
        ]
        for (body, reason) in cases {
            #expect(throws: SignalingError.malformed(reason)) { try SignalEnvelope.decode(Array(body.utf8)) }
        }
        #expect(throws: SignalingError.unsupportedVersion(2)) { try SignalEnvelope.decode(Array(#"{"v":2,"type":"ringing"}"#.utf8)) }
    }
}

/// Real TLS 1.3 over loopback TCP.
@Suite struct SignalingChannelTests {
    /// A listener that echoes each message back and records who connected.
    final class EchoServer: Sendable {
        let listener: SignalingListener
        let task: Task<Void, Never>
        let peers = Recorder<Fingerprint>()

        init(identity: NodeIdentity, limits: SignalingLimits = SignalingLimits()) async throws {
            let listener = try await SignalingListener(host: "127.0.0.1", port: 0, identity: identity, limits: limits)
            self.listener = listener
            let peers = self.peers
            task = Task {
                await listener.run { connection, messages in
                    peers.append(connection.peer)
                    for await item in messages {
                        switch item {
                        case let .success(envelope): try? await connection.send(envelope)
                        case let .failure(error): try? await connection.send(.error(error.description), call: nil)
                        }
                    }
                }
            }
        }

        func stop() async {
            await listener.close()
            task.cancel()
            await task.value
        }
    }

    @Test func mutualTLSCarriesMessagesAndProvesBothIdentities() async throws {
        let server = try NodeIdentity.generate(commonName: "server"), client = try NodeIdentity.generate(commonName: "client")
        let echo = try await EchoServer(identity: server)
        let reply = try await SignalingClient.connect(host: "127.0.0.1", port: echo.listener.port, identity: client,
                                                     pin: server.fingerprint) { connection, messages in
            #expect(connection.peer == server.fingerprint)
            try await connection.send(.ringing, call: EnvelopeTests.call)
            var iterator = messages.makeAsyncIterator()
            return await iterator.next()
        }
        #expect(try reply?.get() == SignalEnvelope(call: EnvelopeTests.call, .ringing))
        #expect(echo.peers.values == [client.fingerprint])
        await echo.stop()
    }

    @Test func aPeerWithAnotherCertificateThanThePinnedOneIsRefused() async throws {
        let server = try NodeIdentity.generate(), impostor = try NodeIdentity.generate(), client = try NodeIdentity.generate()
        let echo = try await EchoServer(identity: impostor)
        await #expect(throws: SignalingError.wrongIdentity(expected: server.fingerprint, presented: impostor.fingerprint)) {
            try await SignalingClient.connect(host: "127.0.0.1", port: echo.listener.port, identity: client,
                                              pin: server.fingerprint) { _, _ in }
        }
        #expect(echo.peers.values.isEmpty)
        await echo.stop()
    }

    @Test func unreachablePeerIsATypedError() async throws {
        // A port bound but not listening, held for the whole test: connecting is refused, and
        // no other test running beside this one can take the port meanwhile (a listener that
        // was closed again would free it).
        let held = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(held) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(held, $0, length) == 0 && getsockname(held, $0, &length) == 0 }
        }
        try #require(bound, "cannot bind a probe socket (errno \(errno))")
        let port = Int(UInt16(bigEndian: address.sin_port))
        do {
            try await SignalingClient.connect(host: "127.0.0.1", port: port, identity: try NodeIdentity.generate(), pin: nil) { _, _ in }
            Issue.record("connected to a closed port")
        } catch let SignalingError.unreachable(address, reason) {
            #expect(address == "127.0.0.1:\(port)")
            #expect(reason.contains("nothing listens there"), "\(reason)")
        }
    }

    /// Socket errors are told in words that say what to do, not as errno dumps.
    @Test func aBusyPortOrAForeignAddressIsRefusedWithWhatToDo() async throws {
        let identity = try NodeIdentity.generate()
        let first = try await SignalingListener(host: "127.0.0.1", port: 0, identity: identity)
        await #expect(throws: SignalingError.cannotListen("127.0.0.1:\(first.port)",
                                                        reason: "the port is already in use (is another node running? choose another port)")) {
            _ = try await SignalingListener(host: "127.0.0.1", port: first.port, identity: identity)
        }
        await first.close()
        // 192.0.2.1 is a documentation address no machine here has.
        await #expect(throws: SignalingError.cannotListen("192.0.2.1:0",
                                                        reason: "this machine has no such address (use one of its own addresses, or 0.0.0.0 for all)")) {
            _ = try await SignalingListener(host: "192.0.2.1", port: 0, identity: identity)
        }
        for code in [ECONNREFUSED, ETIMEDOUT, EHOSTUNREACH, EACCES] {
            #expect(!SignalingClient.explain(errno: code, fallback: "raw").contains("raw"))
        }
        #expect(SignalingClient.explain(errno: EIO, fallback: "raw") == "raw")
    }

    /// Sends raw bytes inside a TLS connection and returns the messages that came back.
    static func exchange(_ raw: [UInt8], port: Int, identity: NodeIdentity, closeAfter: Bool) async throws -> [Result<SignalEnvelope, SignalingError>] {
        try await SignalingClient.connect(host: "127.0.0.1", port: port, identity: identity, pin: nil) { connection, messages in
            guard case let .channel(writer, channel) = connection.transport else { throw TestFailure("a TLS connection runs over a channel") }
            var buffer = channel.allocator.buffer(capacity: raw.count)
            buffer.writeBytes(raw)
            try await writer.write(buffer)
            if closeAfter { try? await channel.close(mode: .output) }
            var replies: [Result<SignalEnvelope, SignalingError>] = []
            for await reply in messages {
                replies.append(reply)
                if !closeAfter { break }
            }
            return replies
        }
    }

    static func frame(_ body: [UInt8]) -> [UInt8] {
        let n = UInt32(body.count)
        return [UInt8(n >> 24), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] + body
    }

    @Test func badInputGetsAnErrorOrAClosedConnectionAndTheListenerKeepsServing() async throws {
        let server = try NodeIdentity.generate(), client = try NodeIdentity.generate()
        var limits = SignalingLimits()
        limits.maximumFrameSize = 4096
        let echo = try await EchoServer(identity: server, limits: limits)
        let port = echo.listener.port

        // Garbage JSON in a valid frame: an error reply, connection still usable.
        let garbage = try await Self.exchange(Self.frame(Array("{nope".utf8)), port: port, identity: client, closeAfter: false)
        guard case let .success(reply) = garbage.first, case let .error(text) = reply.message else {
            Issue.record("no error reply to garbage JSON: \(garbage)"); return
        }
        #expect(text.contains("malformed"))

        // Unknown message type.
        let unknown = try await Self.exchange(Self.frame(Array(#"{"v":1,"type":"teleport"}"#.utf8)), port: port, identity: client, closeAfter: false)
        guard case let .success(unknownReply) = unknown.first, case let .error(unknownText) = unknownReply.message else {
            Issue.record("no error reply to an unknown type: \(unknown)"); return
        }
        #expect(unknownText.contains("teleport"))

        // Oversized frame: the server reports it and closes.
        let oversized = try await Self.exchange([0x7F, 0xFF, 0xFF, 0xFF] + Array(repeating: 0x41, count: 64), port: port,
                                                identity: client, closeAfter: false)
        guard case let .success(oversizedReply) = oversized.first, case let .error(oversizedText) = oversizedReply.message else {
            Issue.record("no error reply to an oversized frame: \(oversized)"); return
        }
        #expect(oversizedText.contains("exceeds the 4096-byte limit"))

        // Random bytes before any TLS: the handshake fails; nothing reaches the handler.
        var rng = SplitMix64(seed: 7)
        let noise = (0..<512).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        let raw = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port).get()
        var buffer = raw.allocator.buffer(capacity: noise.count)
        buffer.writeBytes(noise)
        try? await raw.writeAndFlush(buffer)
        try? await raw.closeFuture.get()

        // The listener still serves the next caller.
        let next = try await Self.exchange(Self.frame(SignalEnvelope(call: nil, .keepAlive).encoded()), port: port,
                                           identity: client, closeAfter: false)
        #expect(try next.first?.get() == SignalEnvelope(call: nil, .keepAlive))
        #expect(echo.peers.values.count == 4)
        await echo.stop()
    }
}

@Suite struct FrameDecoderTests {
    @Test func framesSplitAcrossReadsAreReassembledAndATruncatedOneIsAnError() throws {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(FrameDecoder(maximum: 4096)))
        let whole = SignalingChannelTests.frame(Array("hello".utf8)) + SignalingChannelTests.frame(Array("world".utf8))
        var first = channel.allocator.buffer(capacity: 16)
        first.writeBytes(whole.prefix(7))
        try channel.writeInbound(first)
        var rest = channel.allocator.buffer(capacity: 16)
        rest.writeBytes(whole.dropFirst(7))
        rest.writeBytes([0, 0, 0, 100, 1, 2, 3])
        try channel.writeInbound(rest)
        #expect(try channel.readInbound(as: ByteBuffer.self).map { String(buffer: $0) } == "hello")
        #expect(try channel.readInbound(as: ByteBuffer.self).map { String(buffer: $0) } == "world")
        #expect(try channel.readInbound(as: ByteBuffer.self) == nil)
        #expect(throws: SignalingError.truncatedFrame) { _ = try channel.finish() }
    }

    @Test func anOversizedLengthIsRefusedBeforeItsBytesArrive() throws {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(FrameDecoder(maximum: 4096)))
        var buffer = channel.allocator.buffer(capacity: 4)
        buffer.writeInteger(UInt32(4097))
        #expect(throws: SignalingError.frameTooLarge(4097, limit: 4096)) { try channel.writeInbound(buffer) }
    }
}

/// Collects values from concurrent tasks.
final class Recorder<Value: Sendable>: Sendable {
    private let storage = Locked<[Value]>([])
    func append(_ value: Value) { storage.withLock { $0.append(value) } }
    var values: [Value] { storage.withLock { $0 } }
}

import Locking

/// The relay client's preamble: control frames until the splice, then the node's own TLS.
@Suite struct RelayPreambleTests {
    static func framed(_ message: RelayMessage, _ allocator: ByteBufferAllocator) -> ByteBuffer {
        message.framed(allocator)
    }

    /// A slow node reads the relay's `connected` and the peer's first TLS record in one read:
    /// the record must reach TLS, not vanish with the preamble handler.
    @Test(arguments: ["connected", "paired"])
    func bytesThatArriveWithTheLastControlFrameGoOnToTLS(op: String) async throws {
        let (messages, continuation) = AsyncStream.makeStream(of: RelayMessage.self)
        let upgrades = Recorder<String>()
        let channel = EmbeddedChannel(handler: RelayPreambleHandler(messages: continuation) { _, message in
            upgrades.append(message.op)
        })
        var read = Self.framed(RelayMessage(op: "waiting", session: "s"), channel.allocator)
        var upgrade = Self.framed(RelayMessage(op: op, session: "s", role: "server"), channel.allocator)
        read.writeBuffer(&upgrade)
        let hello: [UInt8] = [22, 3, 1, 0, 3, 1, 2, 3]
        read.writeBytes(hello)
        try channel.writeInbound(read)

        #expect(upgrades.values == [op])
        #expect(try channel.readInbound(as: ByteBuffer.self).map { Array($0.readableBytesView) } == hello)
        // Later bytes go straight through: the preamble handler has left the pipeline.
        var later = channel.allocator.buffer(capacity: 2)
        later.writeBytes([23, 3])
        try channel.writeInbound(later)
        #expect(try channel.readInbound(as: ByteBuffer.self).map { Array($0.readableBytesView) } == [23, 3])
        #expect(throws: ChannelPipelineError.notFound) { try channel.pipeline.syncOperations.handler(type: RelayPreambleHandler.self) }
        var received: [String] = []
        for await message in messages { received.append(message.op) }
        #expect(received == ["waiting", op])
        _ = try channel.finish()
    }

    @Test func aControlFrameSplitAcrossReadsIsDeliveredOnceWhole() async throws {
        let (messages, continuation) = AsyncStream.makeStream(of: RelayMessage.self)
        let channel = EmbeddedChannel(handler: RelayPreambleHandler(messages: continuation, upgrade: nil))
        let whole = Array(Self.framed(RelayMessage(op: "incoming", token: "t1"), channel.allocator).readableBytesView)
        for chunk in [whole.prefix(3), whole.dropFirst(3).prefix(5), whole.dropFirst(8)] {
            var buffer = channel.allocator.buffer(capacity: chunk.count)
            buffer.writeBytes(chunk)
            try channel.writeInbound(buffer)
        }
        _ = try channel.finish()
        var received: [RelayMessage] = []
        for await message in messages { received.append(message) }
        #expect(received == [RelayMessage(op: "incoming", token: "t1")])
    }
}
