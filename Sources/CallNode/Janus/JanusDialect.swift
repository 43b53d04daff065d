import CallCore
import Clocks
import Foundation
import Janus
import JanusRoom
import Logging
import Media

/// A Janus AudioBridge room as a dialect of the call core: the call joins the room with its
/// offer and hears the room's mix. What is said to Janus is decided by the call's
/// ``JanusRoomSession``; this actor only feeds it the call's signals and Janus's replies and
/// events, in order, and performs what it returns: requests over Janus's HTTP API (one after
/// the other, so a trickled candidate never overtakes the join) with the session's long poll,
/// or over its WebSocket (requests, replies and events on one connection, in order), and timers
/// on the node's clock.
actor JanusDialect: CallDialect {
    /// A room is another WebRTC peer: DTLS-SRTP and Opus, with ICE; this side offers (the
    /// AudioBridge answers, as a VideoRoom does a publisher), except to hear a VideoRoom feed,
    /// which Janus offers; a call cannot outlive its session at Janus.
    nonisolated let traits: DialectTraits
    private var state: JanusRoomSession
    private let http: JanusHTTP
    private let clock: TimerClock
    private let logger: Logger
    private var call: DialectCall?
    /// What was decided before the call started.
    private var early: [JanusRoomAction] = []
    /// Requests wait here to go out in order.
    private let requests: AsyncStream<JanusRequest>
    private let requestSink: AsyncStream<JanusRequest>.Continuation
    /// The long poll that runs now (a new one, or none, makes an older one stop).
    private var pollGeneration = 0
    /// Over Janus's WebSocket: what goes on the connection, and the requests whose replies are
    /// due (a reply is told from an event by its transaction).
    private let socketMessages: AsyncStream<JanusJSON>
    private let socketSink: AsyncStream<JanusJSON>.Continuation
    private var awaitingReply: Set<String> = []

    /// - Parameter frameKeys: an end-to-end encrypted group's keys for this call (its publishing
    ///   call's sender key, a feed's publisher's), nil for a room that opens what it carries.
    init(address: JanusRoomAddress, display: String?, pin: String?, frameKeys: FrameKeys? = nil, clock: TimerClock, logger: Logger) {
        state = JanusRoomSession(address: address, display: display, pin: pin, seed: UInt64.random(in: .min ... .max))
        let feed = state.subscribedFeed != nil
        traits = DialectTraits(peer: .room, resumable: false, firstOffer: feed ? .byCallee : .byCaller, receivesOnly: feed,
                               frameKeys: frameKeys)
        http = JanusHTTP(address)
        self.clock = clock
        self.logger = logger
        (requests, requestSink) = AsyncStream.makeStream(of: JanusRequest.self)
        (socketMessages, socketSink) = AsyncStream.makeStream(of: JanusJSON.self)
    }

    /// Over Janus's WebSocket or Unix socket: one connection carries requests, replies and events.
    private var overWebSocket: Bool { state.address.transport != .http }

    var address: JanusRoomAddress { state.address }

    // MARK: - The call's side

    func start(_ call: DialectCall) {
        self.call = call
        if overWebSocket {
            let address = state.address, messages = socketMessages
            call.run { [weak self] in
                do throws(JanusHTTPError) {
                    let received: @Sendable (JanusJSON) async -> Void = { [weak self] message in await self?.socketReceived(message) }
                    if address.transport == .unixSocket {
                        try await JanusUnixSocket.run(path: address.path, outgoing: messages, incoming: received)
                    } else {
                        try await JanusWebSocket.run(host: address.host, port: address.port, path: address.path, outgoing: messages, incoming: received)
                    }
                    guard !Task.isCancelled else { return }
                    await self?.handle(.transportLost("Janus closed the connection"))
                } catch {
                    guard !Task.isCancelled else { return }
                    await self?.handle(.transportLost(error.description))
                }
            }
        }
        let requests = self.requests, http = self.http, base = state.address.path
        call.run { [weak self] in
            for await request in requests {
                let input: JanusRoomInput
                do throws(JanusHTTPError) {
                    input = .reply(transaction: request.transaction, try await http.post(request.path(base: base), request.body))
                } catch {
                    input = .requestFailed(transaction: request.transaction, detail: error.description)
                }
                guard !Task.isCancelled else { return }
                await self?.handle(input)
            }
        }
        let waiting = early
        early = []
        for action in waiting { perform(action) }
    }

    func dial() {
        handle(.dial)
    }

    func send(_ signal: CallSignal) {
        handle(.call(signal))
    }

    func microphoneMuted(_ muted: Bool) {
        handle(.microphoneMuted(muted))
    }

    /// Leaves the room: the leave and the session's end go out now, not through the queue, whose
    /// task ends with the call.
    func close() async {
        requestSink.finish()
        pollGeneration += 1
        let actions = state.handle(.callClosed)
        if overWebSocket {
            // Sent if the connection still stands; Janus ends the session with the connection anyway.
            for case let .send(request) in actions { socketSink.yield(request.selfContainedBody) }
            socketSink.finish()
            return
        }
        let http = self.http, base = state.address.path
        for case let .send(request) in actions {
            _ = try? await http.post(request.path(base: base), request.body)
        }
    }

    /// A message on Janus's WebSocket: the reply to a request still due, else an event.
    private func socketReceived(_ message: JanusJSON) {
        if let transaction = message["transaction"]?.string, ["success", "error", "ack", "server_info"].contains(message["janus"]?.string ?? ""),
           awaitingReply.remove(transaction) != nil {
            handle(.reply(transaction: transaction, message))
        } else {
            handle(.events([message]))
        }
    }

    // MARK: - Janus's side

    private func handle(_ input: JanusRoomInput) {
        for action in state.handle(input) { perform(action) }
    }

    private func perform(_ action: JanusRoomAction) {
        guard let call else {
            early.append(action)
            return
        }
        switch action {
        case let .send(request):
            if overWebSocket {
                awaitingReply.insert(request.transaction)
                socketSink.yield(request.selfContainedBody)
            } else {
                requestSink.yield(request)
            }
        case .poll where overWebSocket, .stopPolling where overWebSocket:
            break  // the WebSocket brings the events
        case let .poll(session):
            pollGeneration += 1
            let generation = pollGeneration, http = self.http, path = "\(state.address.path)/\(session)"
            call.run { [weak self] in
                while !Task.isCancelled {
                    let input: JanusRoomInput
                    do throws(JanusHTTPError) {
                        input = .events(try await http.poll(session: path))
                    } catch {
                        input = .pollFailed(error.description)
                    }
                    guard !Task.isCancelled, let self, await self.polled(input, generation: generation) else { return }
                }
            }
        case .stopPolling:
            pollGeneration += 1
        case .signalingUp:
            call.signalingUp(peer: nil)
        case let .deliver(signal):
            call.received(signal)
        case let .room(event):
            call.room(event)
        case let .failed(detail):
            logger.notice("room \(state.address.room): \(detail)")
            call.failed(detail)
        case let .arm(timer, delay):
            let clock = self.clock
            call.run { [weak self] in
                try? await clock.sleep(for: delay)
                guard !Task.isCancelled else { return }
                await self?.handle(.timerFired(timer))
            }
        case let .note(text):
            logger.info("room \(state.address.room): \(text)")
        }
    }

    /// What a long poll brought; whether that poll goes on (a failed one is tried again by a
    /// timer the state arms, as a new poll).
    private func polled(_ input: JanusRoomInput, generation: Int) -> Bool {
        guard generation == pollGeneration else { return false }
        handle(input)
        if case .pollFailed = input { return false }
        return generation == pollGeneration
    }
}
