import Crypto
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Testing
@testable import Signaling

/// A signing key that is not the one its certificate names: a peer that copied someone's
/// certificate (it is public) but holds only its own private key.
struct StolenCertificateKey: NIOSSLCustomPrivateKey, Hashable {
    let signer: P256.Signing.PrivateKey
    static func == (lhs: Self, rhs: Self) -> Bool { lhs.derBytes == rhs.derBytes }
    func hash(into hasher: inout Hasher) { hasher.combine(derBytes) }

    var signatureAlgorithms: [SignatureAlgorithm] { [.ecdsaSecp256R1Sha256] }
    var derBytes: [UInt8] { Array(signer.derRepresentation) }

    func sign(channel: any Channel, algorithm: SignatureAlgorithm, data: ByteBuffer) -> EventLoopFuture<ByteBuffer> {
        channel.eventLoop.makeCompletedFuture {
            let signature = try signer.signature(for: Array(data.readableBytesView))
            return ByteBuffer(bytes: signature.derRepresentation)
        }
    }

    func decrypt(channel: any Channel, data: ByteBuffer) -> EventLoopFuture<ByteBuffer> {
        channel.eventLoop.makeFailedFuture(NIOSSLError.failedToLoadPrivateKey)
    }
}

/// The listener's side of identity: whoever connects must prove the certificate it shows.
@Suite struct ImpostorTests {
    enum Presented { case nothing, stolen(NodeIdentity), own(NodeIdentity) }

    /// Connects with a hand-made TLS client and reports whether the handshake completed.
    static func handshake(port: Int, presenting presented: Presented) async throws -> Bool {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv13
        configuration.certificateVerification = .none
        switch presented {
        case .nothing: break
        case let .stolen(victim):
            configuration.certificateChain = [.certificate(try NIOSSLCertificate(bytes: victim.certificateDER, format: .der))]
            configuration.privateKey = .privateKey(NIOSSLPrivateKey(customPrivateKey: StolenCertificateKey(signer: P256.Signing.PrivateKey())))
        case let .own(identity):
            configuration.certificateChain = [.certificate(try NIOSSLCertificate(bytes: identity.certificateDER, format: .der))]
            configuration.privateKey = .privateKey(try NIOSSLPrivateKey(bytes: Array(identity.privateKeyPEM.utf8), format: .pem))
        }
        let context = try NIOSSLContext(configuration: configuration)
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let outcome = HandshakeOutcome(handshake: loop.makePromise(), reply: loop.makePromise())
        let channel = try await ClientBootstrap(group: loop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: context, serverHostname: nil))
                    try channel.pipeline.syncOperations.addHandler(outcome)
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        defer { channel.close(promise: nil) }
        guard try await outcome.handshake.futureResult.get() else { return false }
        // TLS 1.3: the client's handshake ends before the server has judged its certificate.
        // The server's verdict is whether a frame sent now comes back (the listener echoes)
        // or the connection closes.
        var frame = channel.allocator.buffer(capacity: 64)
        let body = SignalEnvelope(call: nil, .keepAlive).encoded()
        frame.writeInteger(UInt32(body.count))
        frame.writeBytes(body)
        try? await channel.writeAndFlush(frame)
        return try await outcome.reply.futureResult.get()
    }

    /// Completes `handshake` when TLS is up (or false if the connection fails first), and
    /// `reply` with the first bytes that come back (false if it closes first).
    final class HandshakeOutcome: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let handshake: EventLoopPromise<Bool>
        let reply: EventLoopPromise<Bool>
        init(handshake: EventLoopPromise<Bool>, reply: EventLoopPromise<Bool>) {
            self.handshake = handshake
            self.reply = reply
        }
        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let event = event as? TLSUserEvent, case .handshakeCompleted = event { handshake.succeed(true) }
            context.fireUserInboundEventTriggered(event)
        }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            reply.succeed(true)
        }
        func channelInactive(context: ChannelHandlerContext) {
            handshake.succeed(false)
            reply.succeed(false)
            context.fireChannelInactive()
        }
        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }

    @Test func aClientWithAStolenCertificateOrNoneIsRefusedAndTheListenerKeepsServing() async throws {
        let node = try NodeIdentity.generate(commonName: "node"), alice = try NodeIdentity.generate(commonName: "alice")
        let echo = try await SignalingChannelTests.EchoServer(identity: node)

        // Alice's certificate with another key: the server checks the handshake signature
        // against the certificate, so the copy proves nothing.
        #expect(try await Self.handshake(port: echo.listener.port, presenting: .stolen(alice)) == false)
        // No certificate at all: mutual TLS asks for one.
        #expect(try await Self.handshake(port: echo.listener.port, presenting: .nothing) == false)
        #expect(echo.peers.values.isEmpty, "a refused client reached the handler: \(echo.peers.values)")

        // Alice herself, with her key, gets through the same client code: the refusals above
        // were about the certificate.
        #expect(try await Self.handshake(port: echo.listener.port, presenting: .own(alice)))
        #expect(echo.peers.values == [alice.fingerprint])
        await echo.stop()
    }
}
