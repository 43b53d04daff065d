import AudioDevices
import Calls
import CallNode
import Foundation
import Locking
import Media

/// A request to the control API, as the server read it.
public struct ControlRequest: Sendable {
    public var method: String
    /// The path without its query (`/v1/calls/…`).
    public var path: String
    public var query: [String: String]
    public var body: [UInt8]

    public init(method: String, path: String, query: [String: String] = [:], body: [UInt8] = []) {
        self.method = method
        self.path = path
        self.query = query
        self.body = body
    }

    /// Splits `uri` into its path and its (percent-decoded) query.
    public init(method: String, uri: String, body: [UInt8] = []) {
        let parts = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        var query: [String: String] = [:]
        if parts.count == 2 {
            for pair in parts[1].split(separator: "&") {
                let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let key = String(kv[0]).removingPercentEncoding ?? String(kv[0])
                query[key] = kv.count == 2 ? (String(kv[1]).removingPercentEncoding ?? String(kv[1])) : ""
            }
        }
        self.init(method: method, path: String(parts.first ?? ""), query: query, body: body)
    }
}

/// The control API's answer: a status and a body (JSON, but for a recording or a picture).
public struct ControlResponse: Sendable {
    public var status: Int
    public var contentType = "application/json"
    public var body: [UInt8]
    /// Headers besides the content's type and length.
    public var headers: [(name: String, value: String)] = []

    init(status: Int, contentType: String, body: [UInt8], headers: [(name: String, value: String)] = []) {
        self.status = status
        self.contentType = contentType
        self.body = body
        self.headers = headers
    }

    init(_ status: Int, _ object: [String: Any]) {
        self.status = status
        var bytes = Array(JSONLine.data(object) ?? Data("{}\n".utf8))
        if bytes.isEmpty { bytes = Array("{}\n".utf8) }
        body = bytes
    }

    /// An error: `{"error": reason}` with a 4xx or 5xx status.
    static func error(_ status: Int, _ reason: String) -> ControlResponse {
        ControlResponse(status, ["error": reason])
    }
}

/// What a request asks for, once its route is known.
struct ControlRoute: Sendable, Equatable {
    let method: String
    /// Path components; `{id}` stands for a call (its ID or an unambiguous start of it).
    let pattern: [String]

    init(_ method: String, _ path: String) {
        self.method = method
        pattern = path.split(separator: "/").map(String.init)
    }

    var path: String { "/" + pattern.joined(separator: "/") }

    /// The call ID in `components`, if they match this route.
    func match(_ components: [String]) -> (matches: Bool, id: String?) {
        guard components.count == pattern.count else { return (false, nil) }
        var id: String?
        for (component, expected) in zip(components, pattern) {
            if expected == "{id}" {
                id = component
            } else if component != expected {
                return (false, nil)
            }
        }
        return (true, id)
    }
}

/// The control API of a running node: every request a program may make, answered in JSON.
/// The HTTP server (``ControlServer``) reads requests and streams events; this type decides
/// what each request does, and can be called directly (tests, an embedder's own transport).
///
/// A request never blocks the node: each is a few actor calls, and those that wait for the
/// peer (a hold's re-offer) return once the node has taken them, as the terminal's keys do.
public final class ControlAPI: Sendable {
    public let node: CallNode
    public let events: ControlEvents
    /// What the events said of each live call (its start, encryption, codec).
    let facts = ControlCallFacts()
    /// Starts a drain (the command line's: taking no new calls, exiting once the last ends).
    private let drainHandler: DrainHandler
    struct Playback {
        let id: UUID
        let source: PromptSource
    }
    struct Recording {
        let path: String
        let sink: WAVFileSink
    }
    struct State {
        var playbacks: [UUID: Playback] = [:]
        var recordings: [UUID: Recording] = [:]
        var drain: Task<Void, Never>?
    }
    let state = Locked(State())

    final class DrainHandler: Sendable {
        let call: @Sendable (Duration?) async -> Void
        init(_ call: @escaping @Sendable (Duration?) async -> Void) { self.call = call }
    }

    /// - Parameter drain: What `POST /v1/drain` does (default: the node's own drain, which
    ///   returns when the calls have ended; the command line also exits then).
    public init(node: CallNode, events: ControlEvents = ControlEvents(),
                drain: (@Sendable (Duration?) async -> Void)? = nil) {
        self.node = node
        self.events = events
        self.drainHandler = DrainHandler(drain ?? { [node] grace in _ = await node.drain(grace: grace) })
    }

    /// Every route the API serves, in the order the OpenAPI document lists them.
    static let routes: [ControlRoute] = [
        ControlRoute("GET", "/v1/node"),
        ControlRoute("GET", "/v1/calls"),
        ControlRoute("POST", "/v1/calls"),
        ControlRoute("GET", "/v1/calls/{id}"),
        ControlRoute("POST", "/v1/calls/{id}/answer"),
        ControlRoute("POST", "/v1/calls/{id}/progress"),
        ControlRoute("POST", "/v1/calls/{id}/decline"),
        ControlRoute("POST", "/v1/calls/{id}/hangup"),
        ControlRoute("POST", "/v1/calls/{id}/transfer"),
        ControlRoute("POST", "/v1/calls/{id}/hold"),
        ControlRoute("POST", "/v1/calls/{id}/resume"),
        ControlRoute("POST", "/v1/calls/{id}/mute"),
        ControlRoute("POST", "/v1/calls/{id}/unmute"),
        ControlRoute("POST", "/v1/calls/{id}/swap"),
        ControlRoute("POST", "/v1/calls/{id}/merge"),
        ControlRoute("POST", "/v1/calls/{id}/unmerge"),
        ControlRoute("POST", "/v1/calls/{id}/dtmf"),
        ControlRoute("PUT", "/v1/calls/{id}/volume"),
        ControlRoute("POST", "/v1/calls/{id}/play"),
        ControlRoute("DELETE", "/v1/calls/{id}/play"),
        ControlRoute("POST", "/v1/calls/{id}/record"),
        ControlRoute("DELETE", "/v1/calls/{id}/record"),
        ControlRoute("PUT", "/v1/do-not-disturb"),
        ControlRoute("POST", "/v1/drain"),
        ControlRoute("GET", "/v1/events"),
        ControlRoute("GET", "/v1/recents"),
        ControlRoute("GET", "/v1/recents/{id}"),
        ControlRoute("GET", "/v1/recents/{id}/quality"),
        ControlRoute("GET", "/v1/recents/{id}/quality.svg"),
        ControlRoute("GET", "/v1/recents/{id}/recording"),
    ]

    /// Every route as `METHOD /path` (`{id}` for a call), for the OpenAPI check.
    public static var routeNames: [String] { routes.map { "\($0.method) \($0.path)" } }

    /// Answers `request`. `GET /v1/events` is the server's (it streams); here it is a 400.
    public func respond(to request: ControlRequest) async -> ControlResponse {
        // Empty components count (`/v1/calls//hangup` names no call, it is not `/v1/calls/hangup`);
        // the leading slash and one trailing slash do not.
        var components = request.path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        if components.first == "" { components.removeFirst() }
        if components.count > 1, components.last == "" { components.removeLast() }
        var pathKnown = false
        for route in Self.routes {
            let (matches, id) = route.match(components)
            guard matches else { continue }
            pathKnown = true
            guard route.method == request.method else { continue }
            let body: [String: Any]
            switch Self.parseBody(request.body) {
            case let .success(parsed): body = parsed
            case let .failure(problem): return .error(400, problem.reason)
            }
            if let id, route.pattern.dropFirst().first == "recents" {
                // A recent call, not a live one.
                return await answering { try await recent(id, part: route.pattern.count > 3 ? route.pattern[3] : nil) }
            }
            if let id {
                switch resolve(id) {
                case let .success(call): return await perform(route, call: call, body: body)
                case let .failure(problem): return .error(problem.status, problem.reason)
                }
            }
            return await perform(route, call: nil, body: body, query: request.query)
        }
        if pathKnown {
            let allowed = Self.routes.filter { $0.match(components).matches }.map(\.method).joined(separator: ", ")
            return .error(405, "\(request.method) is not served at \(request.path) (it takes \(allowed))")
        }
        return .error(404, "no such route: \(request.method) \(request.path) (docs/control-api.openapi.json lists them)")
    }

    /// `body`'s answer, or its problem's.
    private func answering(_ body: () async throws -> ControlResponse) async -> ControlResponse {
        do {
            return try await body()
        } catch let problem as Problem {
            return .error(problem.status, problem.reason)
        } catch {
            return .error(500, "\(error)")
        }
    }

    struct Problem: Error {
        let status: Int
        let reason: String
    }

    static func parseBody(_ bytes: [UInt8]) -> Result<[String: Any], Problem> {
        guard bytes.contains(where: { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) }) else { return .success([:]) }
        guard let value = try? JSONSerialization.jsonObject(with: Data(bytes)) else {
            return .failure(Problem(status: 400, reason: "the body is not JSON"))
        }
        guard let object = value as? [String: Any] else {
            return .failure(Problem(status: 400, reason: "the body must be a JSON object"))
        }
        return .success(object)
    }

    /// The live call `id` names: its whole UUID, or a start of it no other live call shares.
    func resolve(_ id: String) -> Result<ObservedCall, Problem> {
        switch IDPrefixMatch(id, in: node.manager.observer.calls, id: \.id) {
        case let .one(call): .success(call)
        case .none:
            .failure(Problem(status: 404, reason: UUID(uuidString: id).map { "no call \($0.uuidString) (it has ended, or never was)" }
                             ?? "no call whose ID starts with '\(id)' (GET /v1/calls lists them)"))
        case let .several(count): .failure(Problem(status: 409, reason: "'\(id)' starts \(count) calls' IDs: give more of it"))
        }
    }

    private func perform(_ route: ControlRoute, call: ObservedCall?, body: [String: Any], query: [String: String] = [:]) async -> ControlResponse {
        let action = route.pattern.last ?? ""
        do {
            if let call { return try await perform(action, method: route.method, call: call, body: body) }
            switch (route.method, route.path) {
            case ("GET", "/v1/node"): return await nodeStatus()
            case ("GET", "/v1/calls"):
                var list: [[String: Any]] = []
                for call in node.manager.observer.calls { list.append(await describe(call)) }
                return ControlResponse(200, ["calls": list])
            case ("POST", "/v1/calls"): return try await placeCall(body)
            case ("PUT", "/v1/do-not-disturb"):
                guard let on = body["on"] as? Bool else { throw Problem(status: 400, reason: "give {\"on\": true} or {\"on\": false}") }
                await node.manager.setDoNotDisturb(on)
                return ControlResponse(200, ["do_not_disturb": on])
            case ("POST", "/v1/drain"):
                let grace = try number(body, "grace_s", in: 0...86_400)
                let calls = node.manager.observer.calls.count
                let handler = drainHandler
                // The drain returns when the calls have ended: it is started, not waited for
                // (the API keeps the task and ``close()`` cancels it). One drain at a time.
                let started = state.withLock { state -> Bool in
                    guard state.drain == nil else { return false }
                    state.drain = Task { await handler.call(grace.map { .milliseconds(Int64($0 * 1000)) }) }
                    return true
                }
                if !started { return ControlResponse(200, ["draining": true, "calls": calls]) }
                return ControlResponse(202, ["draining": true, "calls": calls, "grace_s": grace as Any? ?? NSNull()])
            case ("GET", "/v1/recents"): return try await recentsList(query)
            case ("GET", "/v1/events"):
                return .error(400, "events stream over HTTP (GET /v1/events on the control socket)")
            default:
                return .error(404, "no such route: \(route.method) \(route.path)")
            }
        } catch let problem as Problem {
            return .error(problem.status, problem.reason)
        } catch {
            return .error(500, "\(error)")
        }
    }

    private func perform(_ action: String, method: String, call: ObservedCall, body: [String: Any]) async throws -> ControlResponse {
        let id = call.id
        switch (method, action) {
        case ("GET", _):
            return ControlResponse(200, await describe(call))
        case ("POST", "answer"):
            guard !call.isOutgoing, call.phase == .invitationReceived else {
                throw Problem(status: 409, reason: "the call is not ringing here (it is \(Self.status(of: call))): only a ringing incoming call is answered")
            }
            let others = try (body["others"] as? String).map { name -> OtherCallsOnAnswer in
                guard let others = OtherCallsOnAnswer(rawValue: name) else {
                    throw Problem(status: 400, reason: "others must be one of \(OtherCallsOnAnswer.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                return others
            } ?? .hold
            try await request { () async throws(CallRequestError) in try await node.answer(id, others: others) }
        case ("POST", "progress"):
            guard !call.isOutgoing, call.phase == .invitationReceived else {
                throw Problem(status: 409, reason: "the call is not ringing here (it is \(Self.status(of: call))): only a ringing incoming call sends early media")
            }
            try await nodeCall { () async throws(CallNodeError) in try await node.progress(id) }
        case ("POST", "decline"):
            guard !call.isOutgoing, call.phase == .invitationReceived else {
                throw Problem(status: 409, reason: "the call is not ringing here (it is \(Self.status(of: call))): hang it up instead")
            }
            try await request { () async throws(CallRequestError) in try await node.hangUp(id) }
            return ControlResponse(200, ["id": id.uuidString, "ended": true])
        case ("POST", "hangup"):
            // The end is taken; the call's `ended` event follows once it is torn down.
            try await request { () async throws(CallRequestError) in try await node.hangUp(id) }
            return ControlResponse(200, ["id": id.uuidString, "ended": true])
        case ("POST", "transfer"):
            try await transfer(call, body: body)
        case ("POST", "hold"), ("POST", "resume"):
            guard call.hasConnected else {
                throw Problem(status: 409, reason: "the call is \(Self.status(of: call)): only a connected call is held or resumed")
            }
            try await request { () async throws(CallRequestError) in try await node.setHeld(id, action == "hold") }
        case ("POST", "mute"), ("POST", "unmute"):
            try await request { () async throws(CallRequestError) in try await node.setMuted(id, action == "mute") }
        case ("POST", "swap"):
            guard call.hasConnected else { throw Problem(status: 409, reason: "the call is \(Self.status(of: call)): only a connected call is swapped to") }
            try await request { () async throws(CallRequestError) in try await node.swap(to: id) }
        case ("POST", "merge"):
            guard let otherID = body["with"] as? String else { throw Problem(status: 400, reason: "give the call to merge with: {\"with\": ID}") }
            let other = try otherCall(otherID, than: id, "a call is not merged with itself")
            try await request { () async throws(CallRequestError) in try await node.merge(id, with: other.id) }
        case ("POST", "unmerge"):
            try await request { () async throws(CallRequestError) in try await node.unmerge(id) }
        case ("POST", "dtmf"):
            guard let digits = body["digits"] as? String, !digits.isEmpty else {
                throw Problem(status: 400, reason: "give the digits: {\"digits\": \"123#\"} (0–9, *, #, A–D)")
            }
            guard digits.allSatisfy({ "0123456789*#ABCDabcd".contains($0) }) else {
                throw Problem(status: 400, reason: "'\(digits)' has characters DTMF cannot send (0–9, *, #, A–D)")
            }
            guard call.hasConnected else { throw Problem(status: 409, reason: "the call is \(Self.status(of: call)): digits are sent on a connected call") }
            try await request { () async throws(CallRequestError) in try await node.playDTMF(id, digits.uppercased()) }
        case ("PUT", "volume"):
            let microphone = try number(body, "microphone", in: 0...4), output = try number(body, "output", in: 0...4)
            guard microphone != nil || output != nil else {
                throw Problem(status: 400, reason: "give a gain, 0–4 (1: as it is): {\"microphone\": 0.5} and/or {\"output\": 2}")
            }
            var volumes = CallVolumes()
            try await nodeCall { () async throws(CallNodeError) in volumes = try await node.setVolumes(id, microphone: microphone, output: output) }
            return ControlResponse(200, ["id": id.uuidString, "microphone": volumes.microphone, "output": volumes.output])
        case ("POST", "play"):
            return try await play(into: call, body)
        case ("DELETE", "play"):
            guard let playing = state.withLock({ $0.playbacks[id] }) else {
                throw Problem(status: 409, reason: "nothing is playing into the call")
            }
            try await nodeCall { () async throws(CallNodeError) in try await node.play(nil, into: id) }
            playing.source.stop()
            state.withLock { state in
                if state.playbacks[id]?.id == playing.id { state.playbacks[id] = nil }
            }
            events.publish(["event": "playback-stopped", "call": id.uuidString, "playback": playing.id.uuidString])
            return ControlResponse(200, ["playback": playing.id.uuidString, "stopped": true])
        case ("POST", "record"):
            return try await record(call, body)
        case ("DELETE", "record"):
            guard let stopped = try await stopRecording(id, reason: "stopped") else {
                throw Problem(status: 409, reason: "the call is not being recorded (POST …/record starts it)")
            }
            return ControlResponse(200, stopped)
        default:
            throw Problem(status: 405, reason: "\(method) \(action) is not served")
        }
        let now = node.manager.observer.calls.first { $0.id == id }
        return ControlResponse(200, now.map { Self.summary($0) } ?? ["id": id.uuidString, "ended": true])
    }

    /// Runs a request of the call manager: its refusals are the caller's mistake (409).
    private func request(_ body: () async throws(CallRequestError) -> Void) async throws {
        do { try await body() } catch {
            switch error {
            case .unknownCall: throw Problem(status: 404, reason: error.description)
            default: throw Problem(status: 409, reason: error.description)
            }
        }
    }

    func nodeCall(_ body: () async throws(CallNodeError) -> Void) async throws {
        do { try await body() } catch {
            switch error {
            case .noSuchCall: throw Problem(status: 404, reason: error.description)
            case .media: throw Problem(status: 400, reason: error.description)
            default: throw Problem(status: 409, reason: error.description)
            }
        }
    }

    func number(_ body: [String: Any], _ key: String, in range: ClosedRange<Double>) throws -> Double? {
        guard let value = body[key] else { return nil }
        guard let number = value as? Double ?? (value as? Int).map(Double.init), range.contains(number) else {
            throw Problem(status: 400, reason: "\(key) must be a number from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    private func placeCall(_ body: [String: Any]) async throws -> ControlResponse {
        guard let text = body["to"] as? String, !text.isEmpty else {
            throw Problem(status: 400, reason: "give whom to call: {\"to\": \"bob\"} (a contact, HOST:PORT, FINGERPRINT@HOST:PORT, sip:USER@HOST or janus:http://HOST:8088/janus#ROOM)")
        }
        if let pin = body["pin"], !(pin is String || pin is NSNull) { throw Problem(status: 400, reason: "pin must be text (a Janus room's PIN)") }
        let target: CallTarget
        switch CallTarget.parse(text, relay: node.configuration.relay, roomPIN: body["pin"] as? String) {
        case let .success(parsed): target = parsed
        case let .failure(problem): throw Problem(status: 400, reason: problem.description)
        }
        do {
            let id = try await node.call(target, title: body["title"] as? String)
            return ControlResponse(201, ["id": id.uuidString, "target": target.description])
        } catch {
            switch error {
            case .unknownContact, .contactWithoutAddress, .sip: throw Problem(status: 400, reason: error.description)
            default: throw Problem(status: 409, reason: error.description)
            }
        }
    }

    /// A node event: published to readers, and the end of a call ends its prompt and recording.
    public func nodeEvent(_ event: NodeEvent) async {
        if case let .ended(call, _, _, _) = event {
            // Its recording is complete (and said) before its end is: a reader may forget the
            // call at its end.
            let playing = state.withLock { $0.playbacks.removeValue(forKey: call) }
            playing?.source.stop()
            _ = try? await stopRecording(call, reason: "the call ended")
        }
        facts.take(event)
        events.publish(EventJSON.object(event))
    }

    /// Stops what the API started: prompts, recordings (complete files), a drain it started.
    public func close() async {
        let (playbacks, calls, drain) = state.withLock { state in
            let taken = (Array(state.playbacks.values), Array(state.recordings.keys), state.drain)
            state.playbacks = [:]
            state.drain = nil
            return taken
        }
        for playback in playbacks { playback.source.stop() }
        for call in calls { _ = try? await stopRecording(call, reason: "the control API closed") }
        drain?.cancel()
        events.finish()
    }

    private func nodeStatus() async -> ControlResponse {
        let calls = node.manager.observer.calls
        var object: [String: Any] = [
            "name": node.identity.commonName, "fingerprint": node.identity.fingerprint.hex,
            "calls": calls.count, "do_not_disturb": await node.manager.isDoNotDisturbOn,
            "draining": await node.draining, "taking_calls": await node.isTakingCalls,
            "event_readers": events.readers, "event_readers_dropped": events.droppedReaders,
        ]
        object["listen"] = node.listenAddress?.description ?? NSNull()
        return ControlResponse(200, object)
    }

    /// What the list of calls says of each.
    static func summary(_ call: ObservedCall) -> [String: Any] {
        ["id": call.id.uuidString, "direction": call.isOutgoing ? "outgoing" : "incoming",
         "peer": call.handle.value, "name": call.callerName ?? NSNull(),
         "status": status(of: call), "state": call.phase.description,
         "held": call.isOnHold, "muted": call.isMuted, "group": call.group?.uuidString ?? NSNull()]
    }

    private func describe(_ call: ObservedCall) async -> [String: Any] {
        var object = Self.summary(call)
        let (playing, recording) = state.withLock { ($0.playbacks[call.id]?.id, $0.recordings[call.id]?.path) }
        object["playback"] = playing?.uuidString ?? NSNull()
        object["recording"] = recording ?? NSNull()
        object["peer_kind"] = ControlCallFacts.peerKind(call.handle.value)
        object.merge(facts.object(call.id)) { _, known in known }
        if call.hasConnected, let statistics = await node.statistics(call.id),
           var stats = EventJSON.object(.statistics(call.id, statistics)) {
            stats["event"] = nil
            stats["call"] = nil
            object["stats"] = stats
        } else {
            object["stats"] = NSNull()
        }
        return object
    }

    /// One word for where a call is: ringing, dialing, connecting, connected (or held).
    static func status(of call: ObservedCall) -> String {
        if call.hasConnected { return call.isOnHold ? "held" : "connected" }
        switch call.phase {
        case .invitationReceived: return "ringing"
        case .waitingForCapabilities, .invitationSent: return "dialing"
        case .ended: return "ended"
        default: return "connecting"
        }
    }
}
