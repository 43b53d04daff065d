import CallCore
import JanusRoom
import Testing

/// The VideoRoom in a room session: a publisher joins with its offer and learns of the other
/// publishers; a subscription is offered its feed by Janus and answers with `start`.
@Suite struct JanusVideoRoomTests {
    static func session(_ fragment: String) throws -> JanusRoomSession {
        let address = try #require(JanusRoomAddress("janus:http://127.0.0.1:8088/janus#\(fragment)"))
        return JanusRoomSession(address: address, display: "alice", pin: "4321", seed: 7)
    }

    static func sent(_ actions: [JanusRoomAction]) -> [JanusRequest] {
        actions.compactMap { if case let .send(request) = $0 { request } else { nil } }
    }

    static func event(_ data: JanusJSON, jsep: JanusJSON? = nil) -> JanusJSON {
        let event: JanusJSON = ["janus": "event", "sender": 22, "plugindata": ["plugin": "janus.plugin.videoroom", "data": data]]
        return event.setting("jsep", jsep)
    }

    /// Dialled, session 11 and handle 22 given: the attach named the VideoRoom.
    static func attached(_ room: inout JanusRoomSession) throws -> [JanusRoomAction] {
        let create = try #require(sent(room.handle(.dial)).first)
        let attach = try #require(sent(room.handle(.reply(transaction: create.transaction, ["janus": "success", "data": ["id": 11]]))).first)
        #expect(attach.body["plugin"] == "janus.plugin.videoroom")
        return room.handle(.reply(transaction: attach.transaction, ["janus": "success", "data": ["id": 22]]))
    }

    @Test func anAddressNamesTheVideoRoomToPublishToOrAFeedToHear() throws {
        let publish = try #require(JanusRoomAddress("janus:http://h:8088/janus#videoroom:5000"))
        #expect(publish.plugin == .videoRoom(feed: nil) && publish.room == "5000")
        let hear = try #require(JanusRoomAddress("janus:ws://h#videoroom:lobby/8812"))
        #expect(hear.plugin == .videoRoom(feed: "8812") && hear.room == "lobby" && hear.transport == .webSocket)
        for address in [publish, hear] { #expect(JanusRoomAddress(address.description) == address, "\(address)") }
        #expect(JanusRoomAddress("janus:http://h#1234")?.plugin == .audioBridge)
        #expect(JanusRoomAddress("janus:http://h#videoroom:") == nil)
        #expect(JanusRoomAddress("janus:http://h#videoroom:1/2/3") == nil)
        #expect(JanusRoomAddress.problem("janus:http://h#videoroom:5000/bad feed")?.contains("feed") == true)
    }

    /// `#e2ee:ROOM` is a VideoRoom whose frames are encrypted end to end: the publisher's offer
    /// and a feed's answer say `"e2ee": true` (a `require_e2ee` room refuses one that does not).
    @Test func anEncryptedGroupSaysSoWithEachOfferAndAnswer() throws {
        let group = try #require(JanusRoomAddress("janus:http://h:8088/janus#e2ee:5200"))
        #expect(group.plugin == .videoRoom(feed: nil) && group.endToEnd && group.room == "5200")
        let feed = try #require(JanusRoomAddress("janus:unix:/run/janus.sock#e2ee:5200/17"))
        #expect(feed.plugin == .videoRoom(feed: "17") && feed.endToEnd)
        for address in [group, feed] { #expect(JanusRoomAddress(address.description) == address, "\(address)") }
        #expect(JanusRoomAddress("janus:http://h#videoroom:5200")?.endToEnd == false)
        #expect(JanusRoomAddress.problem("janus:http://h#e2ee:")?.contains("#e2ee:ROOM") == true)

        var publisher = try Self.session("e2ee:5200")
        _ = try Self.attached(&publisher)
        let join = try #require(Self.sent(publisher.handle(.call(.offer(sdp: "v=0 offer")))).first)
        #expect(join.body["jsep"] == ["type": "offer", "sdp": "v=0 offer", "e2ee": true])
        var subscriber = try Self.session("e2ee:5200/3")
        _ = subscriber.handle(.call(.invite(CallInvitation())))
        _ = try Self.attached(&subscriber)
        _ = subscriber.handle(.events([Self.event(["videoroom": "attached", "room": 5200], jsep: ["type": "offer", "sdp": "v=0 feed", "e2ee": true])]))
        let start = try #require(Self.sent(subscriber.handle(.call(.answer(sdp: "v=0 mine")))).first)
        #expect(start.body["jsep"] == ["type": "answer", "sdp": "v=0 mine", "e2ee": true])
        // A plain VideoRoom's offer says nothing of it.
        var plain = try Self.session("videoroom:5200")
        _ = try Self.attached(&plain)
        #expect(try #require(Self.sent(plain.handle(.call(.offer(sdp: "v=0")))).first).body["jsep"]?["e2ee"] == nil)
    }

    @Test func aPublisherJoinsWithItsOfferAndHearsOfTheOtherPublishers() throws {
        var room = try Self.session("videoroom:5000")
        #expect(room.subscribedFeed == nil)
        #expect(try Self.attached(&room) == [.signalingUp])
        let join = try #require(Self.sent(room.handle(.call(.offer(sdp: "v=0 offer")))).first)
        let body: JanusJSON = ["request": "joinandconfigure", "ptype": "publisher", "room": 5000, "display": "alice", "pin": "4321"]
        #expect(join.body["body"] == body)
        #expect(join.body["jsep"] == ["type": "offer", "sdp": "v=0 offer"])
        let joined = room.handle(.events([Self.event(["videoroom": "joined", "room": 5000, "id": 9, "publishers": [["id": 3, "display": "bob"]]],
                                                     jsep: ["type": "answer", "sdp": "v=0 answer"])]))
        #expect(joined == [.room(.joined(room: "5000", me: "9", others: [RoomParticipant(id: "3", name: "bob")])), .deliver(.answer(sdp: "v=0 answer"))])
        let carol = RoomParticipant(id: "4", name: "carol")
        #expect(room.handle(.events([Self.event(["videoroom": "event", "publishers": [["id": 4, "display": "carol"]]])])) == [.room(.participantJoined(carol))])
        #expect(room.handle(.events([Self.event(["videoroom": "event", "unpublished": 4])])) == [.room(.participantLeft(carol))])
        // What the VideoRoom says to the one leaving is no one's departure.
        #expect(room.handle(.events([Self.event(["videoroom": "event", "leaving": "ok"])])) == [])
        #expect(room.phase == .joined)
    }

    @Test func aSubscriptionAsksForTheFeedAnswersJanussOfferAndStarts() throws {
        var room = try Self.session("videoroom:5000/3")
        #expect(room.subscribedFeed == "3")
        // The invitation may come before the handle: the subscription waits for it.
        #expect(room.handle(.call(.invite(CallInvitation()))) == [])
        let attached = try Self.attached(&room)
        #expect(attached.first == .signalingUp)
        let join = try #require(Self.sent(attached).first)
        let body: JanusJSON = ["request": "join", "ptype": "subscriber", "room": 5000, "streams": [["feed": 3]], "pin": "4321"]
        #expect(join.body["body"] == body && join.body["jsep"] == nil)
        #expect(room.phase == .joining)
        let offered = room.handle(.events([Self.event(["videoroom": "attached", "room": 5000], jsep: ["type": "offer", "sdp": "v=0 feed"])]))
        #expect(offered == [.deliver(.offer(sdp: "v=0 feed"))])
        #expect(room.phase == .joined)
        let start = try #require(Self.sent(room.handle(.call(.answer(sdp: "v=0 mine")))).first)
        #expect(start.body["body"] == ["request": "start"] && start.body["jsep"] == ["type": "answer", "sdp": "v=0 mine"])
        #expect(room.handle(.events([Self.event(["videoroom": "event", "started": "ok"])])) == [.note("Janus sends the feed")])
    }

    @Test func aSubscriptionGivenAnAnswerInsteadOfTheOfferFails() throws {
        var room = try Self.session("videoroom:5000/3")
        _ = try Self.attached(&room)
        _ = room.handle(.call(.invite(CallInvitation())))
        let actions = room.handle(.events([Self.event(["videoroom": "attached"], jsep: ["type": "answer", "sdp": "v=0"])]))
        guard case let .failed(text)? = actions.first else {
            Issue.record("no failure: \(actions)")
            return
        }
        #expect(text.contains("the feed's offer was due"), "\(text)")
    }

    @Test func theVideoRoomsRefusalsSayWhyInTheUsersTerms() throws {
        let refusals: [(fragment: String, code: Int64, says: String)] = [
            ("videoroom:5000", 426, "no VideoRoom 5000"), ("videoroom:5000", 432, "room 5000 is full"),
            ("videoroom:5000", 433, "refused this PIN"), ("videoroom:5000/3", 428, "no feed 3"),
        ]
        for (fragment, code, says) in refusals {
            var room = try Self.session(fragment)
            _ = try Self.attached(&room)
            _ = room.handle(.call(fragment.contains("/") ? .invite(CallInvitation()) : .offer(sdp: "v=0")))
            let actions = room.handle(.events([Self.event(["videoroom": "event", "error_code": .integer(code), "error": "refused"])]))
            guard case let .failed(text)? = actions.first else {
                Issue.record("\(code): no failure: \(actions)")
                continue
            }
            #expect(text.contains(says), "\(code): \(text)")
            #expect(room.phase == .ended)
        }
    }
}
