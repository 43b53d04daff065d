import CallCore

/// One request to Janus's HTTP API: where it goes (the server, a session, a plugin handle) and
/// its JSON body, which carries its transaction.
public struct JanusRequest: Sendable, Equatable {
    public enum Scope: Sendable, Equatable {
        /// `POST /janus`: a new session.
        case server
        /// `POST /janus/SESSION`: attach, keep-alive, destroy.
        case session(Int64)
        /// `POST /janus/SESSION/HANDLE`: a plugin message, a trickled candidate.
        case handle(session: Int64, handle: Int64)
    }

    public var scope: Scope
    public var body: JanusJSON
    public var transaction: String

    public init(scope: Scope, body: JanusJSON, transaction: String) {
        self.scope = scope
        self.body = body.setting("transaction", .string(transaction))
        self.transaction = transaction
    }

    /// The request's path under the API's base path (`/janus`).
    public func path(base: String) -> String {
        switch scope {
        case .server: base
        case let .session(session): "\(base)/\(session)"
        case let .handle(session, handle): "\(base)/\(session)/\(handle)"
        }
    }

    /// What Janus calls the request (`create`, `attach`, `message`, …).
    public var verb: String { body["janus"]?.string ?? "?" }

    /// The body as Janus's WebSocket API takes it: the session and handle named inside it.
    public var selfContainedBody: JanusJSON {
        switch scope {
        case .server: body
        case let .session(session): body.setting("session_id", .integer(session))
        case let .handle(session, handle): body.setting("session_id", .integer(session)).setting("handle_id", .integer(handle))
        }
    }
}

/// A timer of a room session: it arms them, the dialect fires them on the node's clock.
public enum JanusRoomTimer: Sendable, Hashable {
    /// Janus forgets a session it hears nothing of for `session_timeout` (60 s by default).
    case keepAlive
    /// The long poll failed: it is tried again after a pause before the room counts as lost.
    case pollRetry
}

/// What a room session's dialect hands it: the call's signals and Janus's replies and events.
public enum JanusRoomInput: Sendable, Equatable {
    /// The call is placed: reach Janus.
    case dial
    /// A signal of the call, to go to the room.
    case call(CallSignal)
    /// A request's reply (the HTTP response's JSON body).
    case reply(transaction: String, JanusJSON)
    /// A request got no reply (nothing listens, the connection broke, the reply was not JSON).
    case requestFailed(transaction: String, detail: String)
    /// What the long poll brought (one event or several).
    case events([JanusJSON])
    /// The long poll could not reach Janus.
    case pollFailed(String)
    /// The connection that carries requests and events (Janus's WebSocket) could not be made, or closed.
    case transportLost(String)
    case timerFired(JanusRoomTimer)
    /// This side's microphone was muted or unmuted: the room shows it.
    case microphoneMuted(Bool)
    /// The call is over: let go of what Janus holds for it.
    case callClosed
}

/// What a room session asks its dialect to do.
public enum JanusRoomAction: Sendable, Equatable {
    /// Send a request; its reply comes back as ``JanusRoomInput/reply(transaction:_:)``.
    case send(JanusRequest)
    /// Start long-polling the session's events (again, after a failure).
    case poll(session: Int64)
    /// Stop long-polling.
    case stopPolling
    /// The room is reachable: the call may make its offer.
    case signalingUp
    /// A signal for the call.
    case deliver(CallSignal)
    /// Something happened in the room.
    case room(RoomEvent)
    /// The call cannot go on (`detail` says why, in the user's terms).
    case failed(String)
    case arm(JanusRoomTimer, Duration)
    /// Worth a line in the log.
    case note(String)
}
