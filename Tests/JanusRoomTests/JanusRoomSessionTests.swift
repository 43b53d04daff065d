import CallCore
import JanusRoom
import Testing

/// A Janus AudioBridge room's session, with no concurrency and no Janus: inputs in, actions out.
@Suite struct JanusRoomSessionTests {
    static let offer = "v=0 offer"
    static let offerJsep: JanusJSON = ["type": "offer", "sdp": "v=0 offer"]
    /// "b", in the room before this side.
    static let b = RoomParticipant(id: "5", name: "b")

    /// What Janus sends when this side's join went through: its id 7, "b" already in, the answer.
    static let joinedEvent = event(["audiobridge": "joined", "room": 1234, "id": 7, "participants": [["id": 5, "display": "b", "muted": false]]],
                                   jsep: ["type": "answer", "sdp": "v=0 answer"])

    // MARK: - Helpers

    private static func fresh(room: String = "1234", display: String? = "alice", pin: String? = "4321") -> JanusRoomSession {
        JanusRoomSession(address: JanusRoomAddress(host: "127.0.0.1", room: room), display: display, pin: pin, seed: 42)
    }

    /// The requests among `actions`, in order.
    private static func sent(_ actions: [JanusRoomAction]) -> [JanusRequest] {
        actions.compactMap { action -> JanusRequest? in
            if case let .send(request) = action { return request }
            return nil
        }
    }

    private static func success(_ id: Int64) -> JanusJSON { ["janus": "success", "data": ["id": .integer(id)]] }

    /// An AudioBridge event (`data`) from handle `sender`, with `jsep` when given.
    private static func event(_ data: JanusJSON, sender: Int64 = 22, jsep: JanusJSON? = nil) -> JanusJSON {
        let event: JanusJSON = ["janus": "event", "sender": .integer(sender), "plugindata": ["plugin": "janus.plugin.audiobridge", "data": data]]
        return event.setting("jsep", jsep)
    }

    /// The detail when `actions` are exactly a failure that lets go of what Janus holds: `.failed`, `.stopPolling`,
    /// then requests of these `verbs` (a leave when in the room, then session 11's destroy; none before a session).
    private static func failure(_ actions: [JanusRoomAction], then verbs: [String]) -> String? {
        let requests = sent(actions)
        guard case let .failed(text)? = actions.first, actions.count == 2 + requests.count, actions[1] == .stopPolling,
              requests.map(\.verb) == verbs, requests.last.map({ $0.scope == .session(11) }) ?? true
        else { return nil }
        return text
    }

    /// Dials `room` and answers its create with session 11: the attach request that went out.
    private static func create(_ room: inout JanusRoomSession) throws -> JanusRequest {
        let dialled = sent(room.handle(.dial))
        let create = try #require(dialled.first { $0.verb == "create" })
        let createBody: JanusJSON = ["janus": "create", "transaction": .string(create.transaction)]
        #expect(create.scope == .server)
        #expect(create.body == createBody)
        let creating = room.phase  // read out of the macro: `room` is inout
        #expect(creating == .creating)
        let created = room.handle(.reply(transaction: create.transaction, success(11)))
        let attach = try #require(sent(created).first { $0.verb == "attach" })
        let attachBody: JanusJSON = ["janus": "attach", "plugin": "janus.plugin.audiobridge", "transaction": .string(attach.transaction)]
        #expect(created == [.poll(session: 11), .arm(.keepAlive, JanusRoomSession.keepAliveInterval), .send(attach)])
        #expect(attach.scope == .session(11))
        #expect(attach.body == attachBody)
        let attaching = room.phase
        #expect(attaching == .attaching)
        return attach
    }

    /// A session created (11) and attached (handle 22), signaling up, no offer yet.
    private static func attached(room: String = "1234", display: String? = "alice", pin: String? = "4321") throws -> JanusRoomSession {
        var session = fresh(room: room, display: display, pin: pin)
        let attach = try create(&session)
        #expect(session.handle(.reply(transaction: attach.transaction, success(22))) == [.signalingUp])
        #expect(session.phase == .attached)
        return session
    }

    /// An attached session whose join (with the offer) went out.
    private static func joining() throws -> JanusRoomSession {
        var session = try attached()
        _ = session.handle(.call(.offer(sdp: offer)))
        #expect(session.phase == .joining)
        return session
    }

    /// A session in the room as 7, with "b" (5), the answer delivered.
    private static func joined() throws -> JanusRoomSession {
        var session = try joining()
        _ = session.handle(.events([joinedEvent]))
        #expect(session.phase == .joined)
        return session
    }

    @Test func aJoinCarriesTheOfferTheDisplayNameAndThePin() throws {
        var room = try Self.attached()
        let actions = room.handle(.call(.offer(sdp: Self.offer)))
        let join = try #require(Self.sent(actions).first)
        let expected: JanusJSON = [
            "janus": "message", "body": ["request": "join", "room": 1234, "muted": false, "display": "alice", "pin": "4321"],
            "jsep": ["type": "offer", "sdp": "v=0 offer"], "transaction": .string(join.transaction),
        ]
        #expect(actions == [.send(join)])
        #expect(join.scope == .handle(session: 11, handle: 22))
        #expect(join.body == expected)
        #expect(room.phase == .joining)
    }

    @Test func aRoomNamedByWordsIsJoinedByAStringAndNoNameOrPinIsSentWhenNoneIsGiven() throws {
        var room = try Self.attached(room: "lobby", display: nil, pin: nil)
        let join = try #require(Self.sent(room.handle(.call(.offer(sdp: Self.offer)))).first)
        let body: JanusJSON = ["request": "join", "room": "lobby", "muted": false]
        #expect(join.body["body"] == body)
    }

    @Test func anOfferBeforeTheAttachGoesOutWithTheJoinOnceAttached() throws {
        var room = Self.fresh()
        let attach = try Self.create(&room)
        #expect(room.handle(.call(.offer(sdp: Self.offer))) == [])
        #expect(room.phase == .attaching)
        let actions = room.handle(.reply(transaction: attach.transaction, Self.success(22)))
        let join = try #require(Self.sent(actions).first)
        #expect(actions == [.signalingUp, .send(join)])
        #expect(join.scope == .handle(session: 11, handle: 22))
        #expect(join.body["body"]?["request"]?.string == "join")
        #expect(join.body["jsep"] == Self.offerJsep)
        #expect(room.phase == .joining)
    }

    @Test func candidatesBeforeTheOfferAreTrickledAfterTheJoin() throws {
        var room = try Self.attached()
        #expect(room.handle(.call(.candidates(["a=candidate:1 1 udp 2130706431 192.0.2.1 5000 typ host"], end: false))) == [])
        #expect(room.handle(.call(.candidates(["candidate:2 1 udp 1694498815 198.51.100.7 6000 typ srflx"], end: true))) == [])
        let actions = room.handle(.call(.offer(sdp: Self.offer)))
        let requests = Self.sent(actions)
        try #require(actions.count == 3 && requests.count == 3, "\(actions)")
        #expect(requests.map(\.verb) == ["message", "trickle", "trickle"])
        #expect(requests.allSatisfy { $0.scope == .handle(session: 11, handle: 22) })
        let candidates: JanusJSON = [
            "janus": "trickle", "transaction": .string(requests[1].transaction),
            "candidates": [
                ["candidate": "candidate:1 1 udp 2130706431 192.0.2.1 5000 typ host", "sdpMid": "0", "sdpMLineIndex": 0],
                ["candidate": "candidate:2 1 udp 1694498815 198.51.100.7 6000 typ srflx", "sdpMid": "0", "sdpMLineIndex": 0],
            ],
        ]
        let completed: JanusJSON = ["janus": "trickle", "candidate": ["completed": true], "transaction": .string(requests[2].transaction)]
        #expect(requests[1].body == candidates)
        #expect(requests[2].body == completed)
        // Once the join is out, a candidate goes at once.
        let later = Self.sent(room.handle(.call(.candidates(["candidate:3 1 udp 2130706431 192.0.2.1 5002 typ host"], end: false))))
        #expect(later.map(\.verb) == ["trickle"])
        #expect(later.first?.body["candidates"]?.array?.count == 1)
    }

    @Test func theJoinedEventNamesThisSideAndTheOthersAndDeliversTheAnswer() throws {
        var room = try Self.attached()
        let join = try #require(Self.sent(room.handle(.call(.offer(sdp: Self.offer)))).first)
        // Janus acknowledges the join at once; the answer comes as an event.
        #expect(room.handle(.reply(transaction: join.transaction, ["janus": "ack"])) == [])
        #expect(room.me == nil)
        let actions = room.handle(.events([Self.joinedEvent]))
        #expect(actions == [.room(.joined(room: "1234", me: "7", others: [Self.b])), .deliver(.answer(sdp: "v=0 answer"))])
        #expect(room.phase == .joined)
        #expect(room.me == "7")
        #expect(room.participants == ["5": Self.b])
    }

    @Test func othersComingAndGoingAreAnnouncedByTheNamesTheyJoinedWith() throws {
        var room = try Self.joined()
        let joining = Self.event(["audiobridge": "joined", "room": 1234, "participants": [["id": 6, "display": "c", "muted": false]]])
        let c = RoomParticipant(id: "6", name: "c")
        #expect(room.handle(.events([joining])) == [.room(.participantJoined(c))])
        #expect(room.participants == ["5": Self.b, "6": c])
        let leaving = Self.event(["audiobridge": "event", "room": 1234, "leaving": 5])
        #expect(room.handle(.events([leaving])) == [.room(.participantLeft(Self.b))])
        #expect(room.participants == ["6": c])
        // Someone the room never announced, or who is gone already, leaves no trace.
        #expect(room.handle(.events([Self.event(["audiobridge": "event", "room": 1234, "leaving": 99])])) == [])
        #expect(room.handle(.events([leaving])) == [])
        #expect(room.handle(.events([Self.event(["audiobridge": "event", "room": 1234, "kicked": 6])])) == [.room(.participantLeft(c))])
        #expect(room.participants.isEmpty)
        #expect(room.phase == .joined)
    }

    @Test func aChangedMuteIsAnnouncedOnceAndTalkingForOthersOnly() throws {
        var room = try Self.joined()
        let muted = Self.event(["audiobridge": "event", "room": 1234, "participants": [["id": 5, "display": "b", "muted": true]]])
        let mutedB = RoomParticipant(id: "5", name: "b", muted: true)
        #expect(room.handle(.events([muted])) == [.room(.participantMuted(mutedB, true))])
        #expect(room.participants["5"] == mutedB)
        #expect(room.handle(.events([muted])) == [])
        let unmuted = Self.event(["audiobridge": "event", "room": 1234, "participants": [["id": 5, "display": "b", "muted": false]]])
        #expect(room.handle(.events([unmuted])) == [.room(.participantMuted(Self.b, false))])
        let talking = Self.event(["audiobridge": "talking", "room": 1234, "id": 5])
        let stopped = Self.event(["audiobridge": "stopped-talking", "room": 1234, "id": 5])
        #expect(room.handle(.events([talking])) == [.room(.talking(Self.b, true))])
        #expect(room.handle(.events([stopped])) == [.room(.talking(Self.b, false))])
        #expect(room.handle(.events([Self.event(["audiobridge": "talking", "room": 1234, "id": 7])])) == [])
    }

    @Test func eventsOfAnotherHandleAreIgnored() throws {
        var room = try Self.joined()
        let joining = Self.event(["audiobridge": "joined", "room": 1234, "participants": [["id": 8, "display": "d"]]], sender: 99)
        let destroyed = Self.event(["audiobridge": "destroyed", "room": 1234], sender: 99)
        #expect(room.handle(.events([joining, destroyed])) == [])
        #expect(room.participants == ["5": Self.b])
        #expect(room.phase == .joined)
    }

    // MARK: - Failures, in the user's terms (each lets go of what Janus holds)

    @Test func aRefusedJoinSaysWhyInTheUsersTerms() throws {
        let refusals: [(code: Int64, error: String, says: String)] = [
            (489, "Unauthorized (wrong pin)", "refused this PIN"), (483, "Missing mandatory element (pin)", "needs a PIN"),
            (485, "No such room (1234)", "no room 1234"), (493, "refused", "offer"), (483, "Missing mandatory element (room)", "refused to join"),
        ]
        for (code, error, says) in refusals {
            var room = try Self.joining()
            let refusal = Self.event(["audiobridge": "event", "room": 1234, "error_code": .integer(code), "error": .string(error)])
            let actions = room.handle(.events([refusal]))
            let text = try #require(Self.failure(actions, then: ["message", "destroy"]), "\(code): \(actions)")
            #expect(text.contains(says), "\(code): \(text)")
            #expect(room.phase == .ended)
        }
    }

    @Test func noJanusOrARefusedSessionSaysSo() throws {
        let outcomes: [(answer: (String) -> JanusRoomInput, says: [String])] = [
            ({ .requestFailed(transaction: $0, detail: "connection refused") }, ["no Janus at janus:http://127.0.0.1:8088/janus#1234", "connection refused"]),
            ({ .reply(transaction: $0, ["janus": "error", "error": ["code": 490, "reason": "x"]]) }, ["refused a session", "x (490)"]),
        ]
        for (answer, says) in outcomes {
            var room = Self.fresh()
            let create = try #require(Self.sent(room.handle(.dial)).first)
            let actions = room.handle(answer(create.transaction))
            let text = try #require(Self.failure(actions, then: []), "\(actions)")  // no session yet: nothing to destroy
            #expect(says.allSatisfy { text.contains($0) }, "\(text)")
            #expect(room.phase == .ended)
        }
    }

    @Test func aJanusWithoutTheAudioBridgeSaysSo() throws {
        var room = Self.fresh()
        let attach = try Self.create(&room)
        let actions = room.handle(.reply(transaction: attach.transaction, ["janus": "error", "error": ["code": 460, "reason": "No such plugin"]]))
        let text = try #require(Self.failure(actions, then: ["destroy"]), "\(actions)")
        #expect(text.contains("no AudioBridge"))
        #expect(text.contains("No such plugin"))
        #expect(room.phase == .ended)
    }

    @Test func aSessionJanusForgotSaysSo() throws {
        var room = try Self.joined()
        let keepAlive = try #require(Self.sent(room.handle(.timerFired(.keepAlive))).first)
        let actions = room.handle(.reply(transaction: keepAlive.transaction, ["janus": "error", "error": ["code": 458, "reason": "No such session"]]))
        let text = try #require(Self.failure(actions, then: ["message", "destroy"]), "\(actions)")
        #expect(text.contains("forgot"))
        #expect(room.phase == .ended)
    }

    @Test func aHangupADestroyedRoomOrBeingKickedEndsTheCall() throws {
        let endings: [(event: JanusJSON, says: String)] = [
            (["janus": "hangup", "sender": 22, "reason": "DTLS alert"], "DTLS alert"),
            (Self.event(["audiobridge": "destroyed", "room": 1234]), "destroyed"),
            (Self.event(["audiobridge": "event", "room": 1234, "kicked": 7]), "kicked"),
        ]
        for (event, says) in endings {
            var room = try Self.joined()
            let actions = room.handle(.events([event]))
            let text = try #require(Self.failure(actions, then: ["message", "destroy"]), "\(actions)")
            #expect(text.contains(says), "\(text)")
            #expect(room.phase == .ended)
        }
    }

    @Test func aMalformedEventIsOnlyNotedAndTheCallGoesOn() throws {
        var room = try Self.joined()
        for malformed: JanusJSON in [.string("x"), ["foo": 1]] {
            let actions = room.handle(.events([malformed]))
            let noted = actions.count == 1 && actions.allSatisfy { if case .note = $0 { true } else { false } }
            #expect(noted, "\(actions)")
        }
        #expect(room.phase == .joined)
        #expect(room.participants == ["5": Self.b])
        #expect(room.handle(.events([Self.event(["audiobridge": "talking", "room": 1234, "id": 5])])) == [.room(.talking(Self.b, true))])
    }

    @Test func anOfferWhereTheAnswerIsDueFailsTheCall() throws {
        var room = try Self.joining()
        let offer: JanusJSON = ["type": "offer", "sdp": "v=0 from janus"]
        let actions = room.handle(.events([Self.event(["audiobridge": "event", "room": 1234, "result": "ok"], jsep: offer)]))
        let text = try #require(Self.failure(actions, then: ["message", "destroy"]), "\(actions)")
        #expect(text.contains("offer"))
        #expect(room.phase == .ended)
    }

    @Test func failedPollsAreRetriedThreeTimesThenJanusIsLost() throws {
        var room = try Self.attached()
        for _ in 0..<3 {
            #expect(room.handle(.pollFailed("connection reset")) == [.arm(.pollRetry, JanusRoomSession.pollRetryDelay)])
            #expect(room.handle(.timerFired(.pollRetry)) == [.poll(session: 11)])
        }
        let actions = room.handle(.pollFailed("connection reset"))
        let text = try #require(Self.failure(actions, then: ["destroy"]), "\(actions)")
        #expect(text.contains("lost Janus"))
        #expect(room.phase == .ended)
    }

    @Test func aPollThatBringsEventsStartsTheCountAgain() throws {
        var room = try Self.joined()
        for _ in 0..<3 { _ = room.handle(.pollFailed("timed out")) }
        #expect(room.handle(.events([])) == [])
        for _ in 0..<3 { #expect(room.handle(.pollFailed("timed out")) == [.arm(.pollRetry, JanusRoomSession.pollRetryDelay)]) }
        #expect(room.phase == .joined)
        let actions = room.handle(.pollFailed("timed out"))
        let text = try #require(Self.failure(actions, then: ["message", "destroy"]), "\(actions)")
        #expect(text.contains("lost Janus"))
    }

    @Test func theKeepAliveGoesOnTheSessionAndIsArmedAgain() throws {
        var room = try Self.attached()
        let actions = room.handle(.timerFired(.keepAlive))
        let keepAlive = try #require(Self.sent(actions).first)
        let expected: JanusJSON = ["janus": "keepalive", "transaction": .string(keepAlive.transaction)]
        #expect(actions == [.send(keepAlive), .arm(.keepAlive, JanusRoomSession.keepAliveInterval)])
        #expect(keepAlive.scope == .session(11))
        #expect(keepAlive.body == expected)
        #expect(JanusRoomSession.keepAliveInterval < Duration.seconds(30))  // under half of Janus's session_timeout
        #expect(room.handle(.reply(transaction: keepAlive.transaction, ["janus": "ack", "session_id": 11])) == [])
        #expect(room.phase == .attached)
    }

    @Test func hangingUpLeavesTheRoomThenDestroysTheSessionAndEndsEverything() throws {
        var room = try Self.joined()
        let actions = room.handle(.call(.end(.hangup)))
        let requests = Self.sent(actions)
        try #require(requests.count == 2, "\(actions)")
        let leave: JanusJSON = ["janus": "message", "body": ["request": "leave"], "transaction": .string(requests[0].transaction)]
        let destroy: JanusJSON = ["janus": "destroy", "transaction": .string(requests[1].transaction)]
        #expect(actions == [.stopPolling, .send(requests[0]), .send(requests[1])])
        #expect(requests[0].scope == .handle(session: 11, handle: 22))
        #expect(requests[0].body == leave)
        #expect(requests[1].scope == .session(11))
        #expect(requests[1].body == destroy)
        #expect(room.phase == .ended)
        // Over: nothing more goes to Janus, whatever comes.
        var inputs: [JanusRoomInput] = [
            .dial, .call(.offer(sdp: Self.offer)), .call(.candidates(["candidate:4 1 udp 1 192.0.2.1 5004 typ host"], end: true)),
            .events([Self.joinedEvent, ["janus": "timeout", "session_id": 11]]), .pollFailed("gone"),
            .timerFired(.keepAlive), .timerFired(.pollRetry), .call(.end(.hangup)), .callClosed,
        ]
        inputs += requests.map { JanusRoomInput.reply(transaction: $0.transaction, ["janus": "success"]) }
        for input in inputs {
            #expect(room.handle(input) == [], "\(input)")
        }
        #expect(room.phase == .ended)
    }

    @Test func closingBeforeTheDialOnlyStopsPollingAndBeforeTheJoinOnlyDestroys() throws {
        var room = Self.fresh()
        #expect(room.handle(.callClosed) == [.stopPolling])
        #expect(room.phase == .ended)
        #expect(room.handle(.dial) == [])
        var inSession = try Self.attached()
        let actions = inSession.handle(.callClosed)
        let destroy = try #require(Self.sent(actions).first)
        #expect(actions == [.stopPolling, .send(destroy)])  // not in the room: no leave
        #expect(destroy.verb == "destroy")
        #expect(destroy.scope == .session(11))
    }

    @Test func aLaterOfferIsAConfigureAndItsAnswerIsDelivered() throws {
        var room = try Self.joined()
        let actions = room.handle(.call(.offer(sdp: "v=0 hold")))
        let configure = try #require(Self.sent(actions).first)
        let expected: JanusJSON = [
            "janus": "message", "body": ["request": "configure"], "jsep": ["type": "offer", "sdp": "v=0 hold"],
            "transaction": .string(configure.transaction),
        ]
        #expect(actions == [.send(configure)])
        #expect(configure.scope == .handle(session: 11, handle: 22))
        #expect(configure.body == expected)
        #expect(room.handle(.reply(transaction: configure.transaction, ["janus": "ack"])) == [])
        let held: JanusJSON = ["type": "answer", "sdp": "v=0 held"]
        let answered = room.handle(.events([Self.event(["audiobridge": "event", "room": 1234, "result": "ok"], jsep: held)]))
        #expect(answered == [.deliver(.answer(sdp: "v=0 held"))])
        #expect(room.phase == .joined)
    }

    @Test func repliesToUnknownTransactionsAreIgnored() throws {
        var room = Self.fresh()
        let attach = try Self.create(&room)
        #expect(room.handle(.reply(transaction: "nobody", Self.success(33))) == [])
        #expect(room.handle(.requestFailed(transaction: "nobody", detail: "refused")) == [])
        #expect(room.phase == .attaching)
        #expect(room.handle(.reply(transaction: attach.transaction, Self.success(22))) == [.signalingUp])
        // An answered transaction is unknown from then on.
        #expect(room.handle(.reply(transaction: attach.transaction, Self.success(99))) == [])
        #expect(room.handle(.requestFailed(transaction: attach.transaction, detail: "late")) == [])
        #expect(room.phase == .attached)
        let join = try #require(Self.sent(room.handle(.call(.offer(sdp: Self.offer)))).first)
        #expect(join.scope == .handle(session: 11, handle: 22))
    }

    @Test func aPollJanusAnswersWithNoSuchSessionEndsTheCallAsARestart() throws {
        var room = try Self.joined()
        let gone: JanusJSON = ["janus": "error", "error": ["code": 458, "reason": "No such session"]]
        let text = try #require(Self.failure(room.handle(.events([gone, Self.event(["audiobridge": "event", "leaving": 5])])),
                                             then: ["message", "destroy"]))
        #expect(text.contains("forgot") && text.contains("restarted"), "\(text)")
        // What followed in the same poll changes nothing once the call failed.
        #expect(room.participants["5"] != nil)
        #expect(room.phase == .ended)
    }

    @Test func aSessionJanusMakesAfterTheCallClosedIsLetGoOf() throws {
        var room = Self.fresh()
        let create = try #require(Self.sent(room.handle(.dial)).first)
        #expect(room.handle(.callClosed) == [.stopPolling])
        let late = room.handle(.reply(transaction: create.transaction, Self.success(77)))
        let destroy = try #require(Self.sent(late).first)
        #expect(late.count == 1 && destroy.verb == "destroy" && destroy.scope == .session(77))
        #expect(room.handle(.reply(transaction: create.transaction, Self.success(78))) == [])
    }

    @Test func aLaterOfferWhileTheJoinIsUnansweredWaitsForTheAnswer() throws {
        var room = try Self.joining()
        #expect(room.handle(.call(.offer(sdp: "v=0 restart"))) == [])
        let actions = room.handle(.events([Self.joinedEvent]))
        let configure = try #require(Self.sent(actions).last)
        #expect(configure.body["body"]?["request"]?.string == "configure")
        #expect(configure.body["jsep"]?["sdp"]?.string == "v=0 restart")
        #expect(actions.contains(.deliver(.answer(sdp: "v=0 answer"))))
        #expect(room.phase == .joined)
    }

    @Test func aLostWebSocketSaysNoJanusBeforeASessionAndLostJanusAfter() throws {
        var dialling = Self.fresh()
        _ = dialling.handle(.dial)
        let early = dialling.handle(.transportLost("connection refused"))
        guard case let .failed(before)? = early.first else {
            Issue.record("no failure: \(early)")
            return
        }
        #expect(before.contains("no Janus at") && before.contains("connection refused"), "\(before)")
        var room = try Self.joined()
        let text = try #require(Self.failure(room.handle(.transportLost("Janus closed the WebSocket")), then: ["message", "destroy"]))
        #expect(text.contains("lost Janus at") && text.contains("closed the WebSocket"), "\(text)")
    }

    @Test func overTheWebSocketARequestNamesItsSessionAndHandleInItsBody() throws {
        let request = JanusRequest(scope: .handle(session: 11, handle: 22), body: ["janus": "trickle"], transaction: "t")
        let expected: JanusJSON = ["janus": "trickle", "transaction": "t", "session_id": 11, "handle_id": 22]
        #expect(request.selfContainedBody == expected)
        #expect(JanusRequest(scope: .server, body: ["janus": "create"], transaction: "c").selfContainedBody == ["janus": "create", "transaction": "c"])
    }

    @Test func aMutedMicrophoneIsShownToTheRoomOnceJoined() throws {
        var joining = try Self.joining()
        #expect(joining.handle(.microphoneMuted(true)) == [])
        var room = try Self.joined()
        let configure = try #require(Self.sent(room.handle(.microphoneMuted(true))).first)
        #expect(configure.body["body"] == ["request": "configure", "muted": true])
        #expect(configure.scope == .handle(session: 11, handle: 22))
        #expect(Self.sent(room.handle(.microphoneMuted(false))).first?.body["body"] == ["request": "configure", "muted": false])
    }

    @Test func someoneTheRoomMutesWhileTalkingStopsTalking() throws {
        var room = try Self.joined()
        #expect(room.handle(.events([Self.event(["audiobridge": "talking", "room": 1234, "id": 5])])) == [.room(.talking(Self.b, true))])
        #expect(room.talking == ["5"])
        let muted = RoomParticipant(id: "5", name: "b", muted: true)
        let actions = room.handle(.events([Self.event(["audiobridge": "event", "participants": [["id": 5, "display": "b", "muted": true]]])]))
        #expect(actions == [.room(.participantMuted(muted, true)), .room(.talking(muted, false))])
        #expect(room.talking.isEmpty)
    }
}
