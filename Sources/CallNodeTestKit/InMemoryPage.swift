import CallNode
import Foundation
import Locking

/// A browser's call page, in memory: what `callnode web` serves, connected to a node without a
/// web server, a WebSocket or Chromium, so calls between a node and a page run on manual time.
///
/// Its wire is the page's: node envelopes as the page's JavaScript sends and reads them (no
/// numbering, no resumption: when the page's connection closes, its call ends), on the node's
/// page entry (``CallNode/servePage(over:frames:remoteAddress:)``), so the node treats it as
/// any page — DTLS only, WebRTC stream ids, one redundant frame, no free page no call. The
/// browser's side of each call (its WebRTC: ICE, DTLS-SRTP, Opus) is played by `browser`, a
/// node of the same in-memory networks carrying the page's calls through a dialect of its own
/// (``PageDialect``); it answers, declines and hangs up as the page's buttons would.
public final class InMemoryPage: Sendable {
    /// Plays the browser's side of the page's calls (its events are the page's).
    public let browser: CallNode
    private let end: InMemorySignalEnd
    private let calls = Locked<[UUID: PageDialect]>([:])
    /// The browser's call IDs, each with the ID its call has on the wire (the node's).
    private let wires = Locked<[UUID: UUID]>([:])

    /// The ID the node knows a browser's call by (nil: not a call of this page).
    public func wire(of browserCall: UUID) -> UUID? { wires.withLock { $0[browserCall] } }
    private let tasks = Locked<[Task<Void, Never>]>([])

    /// Opens the page against `node` from `address` (what the node logs as the page's). `browser`
    /// should use DTLS (``CallNodeConfiguration/keyExchange``), as browsers do.
    public init(browser: CallNode, servedBy node: CallNode, address: String = "page:1") {
        self.browser = browser
        let (pageEnd, nodeEnd) = InMemorySignalPipe.pair((browser.identity.fingerprint, address),
                                                         (node.identity.fingerprint, node.listenAddress?.description ?? "node"))
        end = pageEnd
        let serving = Task {
            await node.servePage(over: nodeEnd.transport, frames: nodeEnd.frames, remoteAddress: address)
            nodeEnd.connection.close()
        }
        let reading = Task { [calls, wires] in
            for await item in pageEnd.messages {
                guard case let .success(envelope) = item, let wire = envelope.call else { continue }
                if let dialect = calls.withLock({ $0[wire] }) {
                    await dialect.received(envelope.message)
                } else if case let .invite(invitation) = envelope.message {
                    // The node rings the page.
                    let dialect = PageDialect(wire: wire, connection: pageEnd.connection) { calls.withLock { $0[wire] = nil } }
                    calls.withLock { $0[wire] = dialect }
                    let admitted = await browser.admit(dialect, handle: "node",
                                                       invitation: CallInvitation(displayName: invitation.displayName, title: invitation.title))
                    if let admitted { wires.withLock { $0[admitted] = wire } } else { calls.withLock { $0[wire] = nil } }
                }
            }
            // The page's connection closed: its calls end.
            for dialect in calls.withLock({ all in defer { all = [:] }; return Array(all.values) }) {
                await dialect.lost("the page's connection closed")
            }
        }
        tasks.withLock { $0 = [serving, reading] }
    }

    /// The page calls the node (its "Call the node" button). Returns the browser's call.
    public func call() async throws(CallNodeError) -> UUID {
        let wire = UUID()
        let calls = self.calls
        let dialect = PageDialect(wire: wire, connection: end.connection) { calls.withLock { $0[wire] = nil } }
        calls.withLock { $0[wire] = dialect }
        do {
            let call = try await browser.call(over: dialect, handle: "node", title: "web")
            wires.withLock { $0[call] = wire }
            return call
        } catch {
            calls.withLock { $0[wire] = nil }
            throw error
        }
    }

    /// A page never closed: its tasks (serving it at the node, reading its wire) end with it.
    deinit {
        end.connection.close()
        for task in tasks.withLock({ $0 }) { task.cancel() }
    }

    /// Closes the page (the tab goes away) and waits until the node has seen it go.
    public func close() async {
        end.connection.close()
        for task in tasks.withLock({ $0 }) { await task.value }
    }
}

/// One call of an ``InMemoryPage``: the call's signals as the page's envelopes, under the call
/// id the page and the node share on the wire (the node's, for a call it placed).
actor PageDialect: CallDialect {
    nonisolated let traits = DialectTraits(peer: .other, resumable: false)
    private let wire: UUID
    private let connection: SignalingConnection
    private let closed: @Sendable () -> Void
    private var call: DialectCall?
    /// What arrived before the call started.
    private var early: [CallSignal] = []

    init(wire: UUID, connection: SignalingConnection, closed: @escaping @Sendable () -> Void) {
        self.wire = wire
        self.connection = connection
        self.closed = closed
    }

    func start(_ call: DialectCall) {
        self.call = call
        for signal in early { call.received(signal) }
        early = []
    }

    func dial() {
        // The page is connected already; it knows the node by its web address, not a certificate.
        call?.signalingUp(peer: nil)
    }

    func send(_ signal: CallSignal) async {
        if signal == .keepAlive {
            try? await connection.send(.keepAlive, call: nil)
        } else if let message = SignalMessage(signal) {
            try? await connection.send(message, call: wire)
        }
    }

    func received(_ message: SignalMessage) {
        guard let signal = CallSignal(message) else { return }
        if let call { call.received(signal) } else { early.append(signal) }
    }

    func lost(_ detail: String) {
        call?.signalingLost(detail, resumable: false)
    }

    func close() {
        closed()
    }
}
