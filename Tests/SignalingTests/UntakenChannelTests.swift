import NIOCore
import NIOPosix
import Locking
import Testing
@testable import Signaling

/// An `NIOAsyncChannel` no one runs stays open (and NIO may trap when its writer goes away
/// unfinished). A connection handed between the event loop and a task that may never take it
/// (an accepted one the listener closes before its accept loop takes it; a relay splice whose
/// reply never comes) is held in a box that runs it empty and closes it when dropped untaken.
@Suite struct UntakenChannelTests {
    /// A real TCP connection on loopback (its client end), wrapped as the signaling code wraps
    /// its channels, on the channel's event loop.
    static func wrapped() async throws -> (any Channel, FramedChannel) {
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(server.localAddress?.port)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port).get()
        // Wrapped before the listener goes: closing it with the connection still in its backlog
        // resets the connection, and a loaded machine once wrapped it closed already.
        let framed = try await channel.eventLoop.submit { try FramedChannel(wrappingChannelSynchronously: channel) }.get()
        server.close(promise: nil)
        return (channel, framed)
    }

    /// Whether the channel closes within ten seconds.
    static func closes(_ channel: any Channel) async -> Bool {
        let outcome = channel.eventLoop.makePromise(of: Bool.self)
        channel.closeFuture.whenComplete { _ in outcome.succeed(true) }
        channel.eventLoop.scheduleTask(in: .seconds(10)) { outcome.succeed(false) }  // a second fulfilment is ignored
        return (try? await outcome.futureResult.get()) ?? false
    }

    @Test func anAcceptedConnectionNeverTakenIsClosedNotDropped() async throws {
        let (channel, framed) = try await Self.wrapped()
        do { _ = AcceptedChannel(framed) }
        #expect(await Self.closes(channel))
    }

    @Test func aRelaySpliceNeverTakenIsClosedNotDropped() async throws {
        let (channel, framed) = try await Self.wrapped()
        do {
            let box = UpgradeBox()
            let promise = channel.eventLoop.makePromise(of: Fingerprint.self)
            box.value.withLock { $0 = (framed, promise.futureResult) }
            promise.fail(SignalingError.closed)
        }
        #expect(await Self.closes(channel))
    }

    @Test func aTakenConnectionIsTheCallersToRun() async throws {
        let (channel, framed) = try await Self.wrapped()
        let box = AcceptedChannel(framed)
        let taken = box.take()
        #expect(taken != nil && box.take() == nil, "taken once")
        try await taken?.executeThenClose { _, _ in }
        #expect(await Self.closes(channel))
    }
}
