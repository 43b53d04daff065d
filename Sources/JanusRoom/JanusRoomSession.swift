import CallCore

/// One call in a Janus AudioBridge room, as a plain value: a session at the server, a handle on
/// the AudioBridge plugin, the join carrying the call's offer, the answer, the room's comings
/// and goings, the keep-alive, and leaving. The call's signals and Janus's replies and events go
/// in, requests and the call's signals come out; time is a timer it arms. It does no I/O: its
/// dialect sends what it returns and feeds back what Janus says.
public struct JanusRoomSession: Sendable {
    /// Where the call is with the room.
    public enum Phase: Sendable, Equatable {
        /// Not dialled yet.
        case idle
        /// Asking Janus for a session.
        case creating
        /// Attaching to the AudioBridge plugin.
        case attaching
        /// Ready: waiting for the call's offer to join with.
        case attached
        /// The join (with the offer) went out; waiting for the answer.
        case joining
        /// In the room, media answered.
        case joined
        /// Over: the session was let go (or failed).
        case ended
    }

    /// What a request that is still out was for.
    private enum Purpose: Sendable, Equatable {
        case create, attach, join, configure, trickle, keepAlive, leave
    }

    /// Janus forgets a session it hears nothing of for a minute (its `session_timeout`): a
    /// keep-alive goes at well under half of that.
    public static let keepAliveInterval: Duration = .seconds(25)
    /// A failed long poll is tried again after this, this many times, before the room is lost.
    public static let pollRetryDelay: Duration = .seconds(1)
    public static let pollRetries = 3
    /// The AudioBridge plugin's package name.
    public static let plugin = "janus.plugin.audiobridge"
    /// The VideoRoom plugin's.
    public static let videoRoomPlugin = "janus.plugin.videoroom"

    /// The plugin the address names.
    var pluginName: String { if case .videoRoom = address.plugin { Self.videoRoomPlugin } else { Self.plugin } }

    /// The VideoRoom feed this call hears (a subscription: Janus offers, this side answers).
    public var subscribedFeed: String? { if case let .videoRoom(feed) = address.plugin { feed } else { nil } }

    public let address: JanusRoomAddress
    /// The name the others see (Janus's `display`).
    public let display: String?
    private let pin: String?
    public internal(set) var phase: Phase = .idle
    /// Janus's ids for the session and the plugin handle, once it gave them.
    public private(set) var session: Int64?
    public private(set) var handle: Int64?
    /// This side's id in the room, once joined.
    public internal(set) var me: String?
    /// Everyone else in the room, by id.
    public internal(set) var participants: [String: RoomParticipant] = [:]
    /// Those the room last said are talking.
    public internal(set) var talking: Set<String> = []
    /// The call's first offer, when it came before the handle (sent with the join).
    private var pendingOffer: String?
    /// Candidates the call trickled before its offer went out.
    private var pendingCandidates: [String] = []
    private var pendingEnd = false
    /// A subscription's invitation that came before the handle.
    private var pendingSubscription = false
    private var requests: [String: Purpose] = [:]
    private var counter = 0
    private let prefix: String
    private var pollFailures = 0

    /// `seed`: makes the transactions of this session unlike another's (any number will do).
    public init(address: JanusRoomAddress, display: String?, pin: String?, seed: UInt64) {
        self.address = address
        self.display = display
        self.pin = pin
        prefix = String(seed % 0xFFFF_FFFF, radix: 36)
    }

    /// Feeds one input; returns what to do, in order.
    public mutating func handle(_ input: JanusRoomInput) -> [JanusRoomAction] {
        guard phase != .ended else { return late(input) }
        switch input {
        case .dial:
            guard phase == .idle else { return [] }
            phase = .creating
            return [request(.server, ["janus": "create"], for: .create)]
        case let .call(signal):
            return called(signal)
        case let .reply(transaction, body):
            guard let purpose = requests.removeValue(forKey: transaction) else { return [] }
            return replied(purpose, body)
        case let .requestFailed(transaction, detail):
            guard let purpose = requests.removeValue(forKey: transaction) else { return [] }
            return unanswered(purpose, detail)
        case let .events(events):
            pollFailures = 0
            var actions: [JanusRoomAction] = []
            for received in events where phase != .ended { actions += event(received) }
            return actions
        case let .pollFailed(detail):
            pollFailures += 1
            guard pollFailures > Self.pollRetries else { return [.arm(.pollRetry, Self.pollRetryDelay)] }
            return fail("lost Janus at \(address): \(detail)")
        case let .transportLost(detail):
            return fail(phase == .creating || phase == .idle ? "no Janus at \(address): \(detail)" : "lost Janus at \(address): \(detail)")
        case .timerFired(.pollRetry):
            guard let session else { return [] }
            return [.poll(session: session)]
        case .timerFired(.keepAlive):
            guard let session else { return [] }
            return [request(.session(session), ["janus": "keepalive"], for: .keepAlive), .arm(.keepAlive, Self.keepAliveInterval)]
        case let .microphoneMuted(muted):
            // An AudioBridge marks the participant muted for the others (and mixes it no more).
            guard phase == .joined, address.plugin == .audioBridge else { return [] }
            return [message(["request": "configure", "muted": .bool(muted)], for: .configure)]
        case .callClosed:
            return leave()
        }
    }

    /// After the end, only a session Janus made for a request still out is let go of.
    private mutating func late(_ input: JanusRoomInput) -> [JanusRoomAction] {
        guard case let .reply(transaction, body) = input, requests.removeValue(forKey: transaction) == .create,
              body["janus"]?.string == "success", let id = body["data"]?["id"]?.integer else { return [] }
        return [request(.session(id), ["janus": "destroy"], for: .leave)]
    }

    // MARK: - The call's side

    private mutating func called(_ signal: CallSignal) -> [JanusRoomAction] {
        switch signal {
        case let .offer(sdp):
            switch phase {
            case .idle, .creating, .attaching:
                pendingOffer = sdp
                return []
            case .attached:
                return join(offer: sdp)
            case .joining:
                // A later offer before the room answered the first: it waits for the answer.
                pendingOffer = sdp
                return []
            case .joined:
                // A later offer (a hold, a resume, an ICE restart): Janus takes it with `configure`.
                return [message(["request": "configure"], jsep: ["type": "offer", "sdp": .string(sdp)], for: .configure)]
            case .ended:
                return []
            }
        case let .candidates(lines, end):
            guard phase == .joining || phase == .joined else {
                pendingCandidates += lines
                pendingEnd = pendingEnd || end
                return []
            }
            return trickle(lines, end: end)
        case .end, .reject:
            return leave()
        case let .error(text):
            return [.note("the call could not take what the room sent: \(text)")]
        case .invite where subscribedFeed != nil:
            // A subscription starts at the invitation: Janus makes the offer.
            guard phase == .attached else {
                pendingSubscription = true
                return []
            }
            return subscribe()
        case let .answer(sdp) where subscribedFeed != nil && phase == .joined:
            return [message(["request": "start"], jsep: ["type": "answer", "sdp": .string(sdp)], for: .configure)]
        case .invite, .ringing, .answer, .earlyAnswer, .accepted, .pathFound, .keepAlive:
            return []  // a room does not ring, answers only this side's offers, and checks its own paths
        }
    }

    /// A subscription to the feed: Janus answers with its offer.
    private mutating func subscribe() -> [JanusRoomAction] {
        guard let feed = subscribedFeed else { return [] }
        phase = .joining
        let feedValue: JanusJSON = Int64(feed).map { .integer($0) } ?? .string(feed)
        var body: JanusJSON = ["request": "join", "ptype": "subscriber", "room": address.roomValue, "streams": [["feed": feedValue]]]
        if let pin { body = body.setting("pin", .string(pin)) }
        return [message(body, for: .join)]
    }

    private mutating func join(offer sdp: String) -> [JanusRoomAction] {
        phase = .joining
        var body: JanusJSON = ["request": "join", "room": address.roomValue, "muted": false]
        if case .videoRoom = address.plugin { body = ["request": "joinandconfigure", "ptype": "publisher", "room": address.roomValue] }
        if let display { body = body.setting("display", .string(display)) }
        if let pin { body = body.setting("pin", .string(pin)) }
        var actions = [message(body, jsep: ["type": "offer", "sdp": .string(sdp)], for: .join)]
        if !pendingCandidates.isEmpty || pendingEnd { actions += trickle(pendingCandidates, end: pendingEnd) }
        pendingCandidates = []
        pendingEnd = false
        return actions
    }

    private mutating func trickle(_ lines: [String], end: Bool) -> [JanusRoomAction] {
        guard let session, let handle else { return [] }
        var actions: [JanusRoomAction] = []
        let candidates = lines.map { line -> JanusJSON in
            let text = line.hasPrefix("a=") ? String(line.dropFirst(2)) : line
            return ["candidate": .string(text), "sdpMid": "0", "sdpMLineIndex": 0]
        }
        if !candidates.isEmpty {
            actions.append(request(.handle(session: session, handle: handle), ["janus": "trickle", "candidates": .array(candidates)], for: .trickle))
        }
        if end {
            actions.append(request(.handle(session: session, handle: handle), ["janus": "trickle", "candidate": ["completed": true]], for: .trickle))
        }
        return actions
    }

    /// Leaves the room and lets go of the session (Janus detaches the handle with it).
    private mutating func leave() -> [JanusRoomAction] {
        let wasIn = phase == .joining || phase == .joined
        phase = .ended
        guard let session else { return [.stopPolling] }
        var actions: [JanusRoomAction] = [.stopPolling]
        if wasIn, let handle {
            actions.append(request(.handle(session: session, handle: handle), ["janus": "message", "body": ["request": "leave"]], for: .leave))
        }
        actions.append(request(.session(session), ["janus": "destroy"], for: .leave))
        return actions
    }

    mutating func fail(_ detail: String) -> [JanusRoomAction] {
        let leaving = leave()
        return [.failed(detail)] + leaving
    }

    // MARK: - Janus's side

    private mutating func replied(_ purpose: Purpose, _ body: JanusJSON) -> [JanusRoomAction] {
        let kind = body["janus"]?.string
        if kind == "error" {
            let reason = Self.errorText(body["error"])
            switch purpose {
            case .create: return fail("Janus at \(address) refused a session: \(reason)")
            case .attach: return fail("Janus at \(address) has no AudioBridge (\(reason))")
            case .join: return fail("Janus refused to join room \(address.room): \(reason)")
            case .keepAlive where body["error"]?["code"]?.integer == 458:
                return fail("Janus at \(address) forgot this call's session (restarted?)")
            case .configure, .trickle, .keepAlive, .leave: return [.note("Janus refused a request: \(reason)")]
            }
        }
        switch purpose {
        case .create:
            guard kind == "success", let id = body["data"]?["id"]?.integer else {
                return fail("Janus at \(address) answered a new session with something else: \(Self.excerpt(body))")
            }
            session = id
            phase = .attaching
            return [.poll(session: id), .arm(.keepAlive, Self.keepAliveInterval),
                    request(.session(id), ["janus": "attach", "plugin": .string(pluginName)], for: .attach)]
        case .attach:
            guard kind == "success", let id = body["data"]?["id"]?.integer else {
                return fail("Janus at \(address) answered the attach with something else: \(Self.excerpt(body))")
            }
            handle = id
            phase = .attached
            var actions: [JanusRoomAction] = [.signalingUp]
            if pendingSubscription {
                pendingSubscription = false
                actions += subscribe()
            }
            if let offer = pendingOffer {
                pendingOffer = nil
                actions += join(offer: offer)
            }
            return actions
        case .join, .configure:
            // `ack`: the answer comes as an event. A synchronous plugin reply may carry an error.
            if let data = body["plugindata"]?["data"], data["error_code"] != nil { return pluginError(data, joining: purpose == .join) }
            return []
        case .trickle, .keepAlive, .leave:
            return []
        }
    }

    private mutating func unanswered(_ purpose: Purpose, _ detail: String) -> [JanusRoomAction] {
        switch purpose {
        case .create: fail("no Janus at \(address): \(detail)")
        case .attach, .join: fail("Janus at \(address) stopped answering: \(detail)")
        case .configure, .trickle, .keepAlive: [.note("a request to Janus got no reply: \(detail)")]
        case .leave: []
        }
    }

    private mutating func event(_ event: JanusJSON) -> [JanusRoomAction] {
        guard let kind = event["janus"]?.string else { return [.note("Janus sent something that is not an event: \(Self.excerpt(event))")] }
        if let sender = event["sender"]?.integer, let handle, sender != handle { return [] }  // another handle's
        switch kind {
        case "event":
            guard let data = event["plugindata"]?["data"] else { return [.note("a Janus event without the plugin's data")] }
            var actions = pluginEvent(data)
            if phase != .ended, let jsep = event["jsep"], subscribedFeed != nil {
                // A subscription: Janus offers the feed, this side answers with `start`.
                guard jsep["type"]?.string == "offer", let sdp = jsep["sdp"]?.string else {
                    return actions + fail("Janus sent an answer or a malformed offer where the feed's offer was due: \(Self.excerpt(jsep))")
                }
                if phase == .joining { phase = .joined }
                return actions + [.deliver(.offer(sdp: sdp))]
            }
            if phase != .ended, let jsep = event["jsep"] {
                guard jsep["type"]?.string == "answer", let sdp = jsep["sdp"]?.string else {
                    return actions + fail("Janus sent an offer or a malformed answer where the room's answer was due: \(Self.excerpt(jsep))")
                }
                actions.append(.deliver(.answer(sdp: sdp)))
                if phase == .joining {
                    phase = .joined
                    if let later = pendingOffer {
                        pendingOffer = nil
                        actions.append(message(["request": "configure"], jsep: ["type": "offer", "sdp": .string(later)], for: .configure))
                    }
                }
            }
            return actions
        case "trickle":
            guard let candidate = event["candidate"] else { return [] }
            if candidate["completed"]?.bool == true { return [.deliver(.candidates([], end: true))] }
            guard let line = candidate["candidate"]?.string else { return [] }
            return [.deliver(.candidates([line], end: false))]
        case "webrtcup":
            return [.note("the room's media path is up at Janus")]
        case "media":
            let receiving = event["receiving"]?.bool ?? false
            return [.note("Janus \(receiving ? "receives" : "stopped receiving") this call's audio")]
        case "slowlink":
            return [.note("Janus reports a slow link (lost packets)")]
        case "hangup":
            guard phase == .joining || phase == .joined else { return [] }
            return fail("Janus closed the room's media: \(event["reason"]?.string ?? "no reason given")")
        case "detached":
            guard phase != .ended else { return [] }
            return fail("Janus detached this call from the AudioBridge")
        case "timeout":
            return fail("Janus timed this call's session out")
        case "error":
            // A poll Janus could not serve: after a restart it knows no such session (458).
            if event["error"]?["code"]?.integer == 458 { return fail("Janus at \(address) forgot this call's session (restarted?)") }
            return [.note("Janus reported an error: \(Self.errorText(event["error"]))")]
        case "keepalive", "ack", "success":
            return []
        default:
            return [.note("a Janus event the node does not know: \(kind)")]
        }
    }

    /// The AudioBridge's own event (`plugindata.data`).
    private mutating func pluginEvent(_ data: JanusJSON) -> [JanusRoomAction] {
        if data["error_code"] != nil { return pluginError(data, joining: phase == .joining) }
        if case .videoRoom = address.plugin { return videoRoomEvent(data) }
        switch data["audiobridge"]?.string {
        case "joined":
            let listed = (data["participants"]?.array ?? []).compactMap(Self.participant)
            if me == nil, phase == .joining, let id = data["id"]?.idText {
                me = id
                for participant in listed { participants[participant.id] = participant }
                return [.room(.joined(room: address.room, me: id, others: listed))]
            }
            return arrived(listed)
        case "event":
            if let leaving = data["leaving"]?.idText { return departed(leaving) }
            if let kicked = data["kicked"]?.idText {
                if kicked == me { return fail("this call was kicked out of room \(address.room)") }
                return departed(kicked)
            }
            return arrived((data["participants"]?.array ?? []).compactMap(Self.participant))
        case "talking", "stopped-talking":
            return talked(data["id"]?.idText, data["audiobridge"]?.string == "talking")
        case "destroyed":
            return fail("room \(address.room) was destroyed at Janus")
        case "left", "roomchanged", "success", nil:
            return []
        case let other?:
            return [.note("an AudioBridge event the node does not know: \(other)")]
        }
    }

    mutating func arrived(_ listed: [RoomParticipant]) -> [JanusRoomAction] {
        var actions: [JanusRoomAction] = []
        for participant in listed where participant.id != me {
            if let known = participants[participant.id] {
                if known.muted != participant.muted { actions.append(.room(.participantMuted(participant, participant.muted))) }
                // The room no longer hears one it muted: whoever was talking is not any more
                // (the AudioBridge drops a muted participant's packets before it measures them).
                if participant.muted, talking.remove(participant.id) != nil { actions.append(.room(.talking(participant, false))) }
            } else {
                actions.append(.room(.participantJoined(participant)))
            }
            participants[participant.id] = participant
        }
        return actions
    }

    /// Someone started or stopped talking (this side's own talk is not news).
    mutating func talked(_ id: String?, _ now: Bool) -> [JanusRoomAction] {
        guard let id, id != me else { return [] }
        if now { talking.insert(id) } else { talking.remove(id) }
        return [.room(.talking(participants[id] ?? RoomParticipant(id: id), now))]
    }

    mutating func departed(_ id: String) -> [JanusRoomAction] {
        talking.remove(id)
        guard let gone = participants.removeValue(forKey: id) else { return [] }
        return [.room(.participantLeft(gone))]
    }

    private mutating func pluginError(_ data: JanusJSON, joining: Bool) -> [JanusRoomAction] {
        let code = data["error_code"]?.integer ?? 0
        let text = data["error"]?.string ?? "error \(code)"
        guard joining else { return [.note("the AudioBridge refused a request: \(text)")] }
        if case .videoRoom = address.plugin { return videoRoomError(code, text) }
        return switch code {
        case 485: fail("no room \(address.room) at Janus (\(address)): \(text)")
        case 489: fail("room \(address.room) at Janus refused this PIN: \(text)")
        case 483 where text.lowercased().contains("pin"): fail("room \(address.room) at Janus needs a PIN: \(text)")
        case 493: fail("Janus could not take this call's offer: \(text)")
        default: fail("Janus refused to join room \(address.room): \(text) (\(code))")
        }
    }

    // MARK: - Requests

    private mutating func request(_ scope: JanusRequest.Scope, _ body: JanusJSON, for purpose: Purpose) -> JanusRoomAction {
        counter += 1
        let transaction = "\(prefix)-\(counter)"
        requests[transaction] = purpose
        return .send(JanusRequest(scope: scope, body: body, transaction: transaction))
    }

    private mutating func message(_ body: JanusJSON, jsep: JanusJSON? = nil, for purpose: Purpose) -> JanusRoomAction {
        guard let session, let handle else { return .note("no handle to send a message on") }
        let request: JanusJSON = ["janus": "message", "body": body]
        // A group encrypting its frames end to end says so with each offer and answer (a
        // `require_e2ee` room refuses a publisher that does not).
        let jsep = address.endToEnd ? jsep?.setting("e2ee", .bool(true)) : jsep
        return self.request(.handle(session: session, handle: handle), request.setting("jsep", jsep), for: purpose)
    }

    static func participant(_ json: JanusJSON) -> RoomParticipant? {
        guard let id = json["id"]?.idText else { return nil }
        return RoomParticipant(id: id, name: json["display"]?.string, muted: json["muted"]?.bool ?? false)
    }

    private static func errorText(_ error: JanusJSON?) -> String {
        let reason = error?["reason"]?.string ?? "no reason given"
        return error?["code"]?.integer.map { "\(reason) (\($0))" } ?? reason
    }

    /// A message shortened for an error line.
    static func excerpt(_ json: JanusJSON) -> String {
        let text = String(decoding: json.serialized, as: UTF8.self)
        return text.count > 160 ? String(text.prefix(160)) + "…" : text
    }
}
