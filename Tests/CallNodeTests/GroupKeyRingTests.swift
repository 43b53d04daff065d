@testable import CallNode
import Foundation
import Media
import Signaling
import Testing

/// An end-to-end encrypted group's keys as a value: who is sent this member's key, a new key
/// when a member leaves, a feed opened with its publisher's key, silence explained while a key
/// is missing, and the group's security code.
struct GroupKeyRingTests {
    static func fingerprint(_ byte: UInt8) -> Fingerprint { Fingerprint(String(repeating: String(format: "%02x", byte), count: 32))! }
    static func member(_ byte: UInt8, port: Int) -> GroupMember {
        GroupMember(fingerprint: fingerprint(byte), address: SignalAddress(host: "192.0.2.\(byte)", port: port))
    }
    static func participant(_ id: String, _ member: GroupMember?, name: String = "someone") -> RoomParticipant {
        RoomParticipant(id: id, name: member?.display(name: name) ?? name)
    }
    static func grant(_ ring: GroupKeyRing, sentTo member: GroupMember, in actions: [GroupKeyRing.Action]) -> GroupKeyGrant? {
        for case let .send(grant, to) in actions where to == member { return grant }
        return nil
    }

    @Test func aMembersDisplayCarriesItsIdentityAndWhereItsNodeTakesKeys() {
        let member = Self.member(7, port: 7600)
        let display = member.display(name: "alice")
        #expect(GroupMember(display: display) == member)
        #expect(GroupMember.name(in: display) == "alice")
        #expect(RoomParticipant(id: "12", name: display).description == "alice (12)")
        // A browser, an older node, a display that only looks like one: not members.
        #expect(GroupMember(display: "alice") == nil)
        #expect(GroupMember(display: nil) == nil)
        #expect(GroupMember(display: "x · callnode nothex@192.0.2.1:7600") == nil)
        #expect(GroupMember(display: "x · callnode \(member.fingerprint.hex)@nowhere") == nil)
    }

    @Test func eachMemberWhoArrivesIsSentThisMembersKeyAndTheCodeCoversEveryone() {
        let me = Self.fingerprint(1), b = Self.member(2, port: 7602), c = Self.member(3, port: 7603)
        var ring = GroupKeyRing(room: "5200", me: me)
        let first = ring.arrived(Self.participant("20", b))
        let grant = Self.grant(ring, sentTo: b, in: first)
        #expect(grant == GroupKeyGrant(room: "5200", epoch: 1, key: ring.ownKey.base64))
        #expect(first.contains(.groupEvent(.groupSecured(securityCode: SecurityCode.group([me, b.fingerprint]), members: 2))))
        // The same participant again (the joined list and an event both name it): nothing new.
        #expect(ring.arrived(Self.participant("20", b)).isEmpty)
        _ = ring.arrived(Self.participant("30", c))
        #expect(ring.memberCount == 3)
        // Every member computes the same digits, whatever order it saw the others in.
        #expect(ring.securityCode == SecurityCode.group([c.fingerprint, me, b.fingerprint]))
        #expect(ring.securityCode != SecurityCode.group([me, b.fingerprint]))
        // A participant that is not a member is sent nothing and changes no code.
        #expect(ring.arrived(Self.participant("40", nil, name: "a browser")).isEmpty)
        #expect(ring.memberCount == 3)
    }

    @Test func aFeedWithoutItsKeyIsSilenceWithAReasonUntilTheKeyComes() throws {
        let b = Self.member(2, port: 7602)
        var ring = GroupKeyRing(room: "5200", me: Self.fingerprint(1))
        _ = ring.arrived(Self.participant("20", b, name: "bob"))
        #expect(ring.feedKey("20") == nil)
        let placed = ring.feedPlaced("20")
        guard case let .feedEvent("20", .senderKey(who, missing?)) = placed.first else {
            Issue.record("no reason for the silence: \(placed)")
            return
        }
        #expect(who.description == "bob (20)")
        #expect(missing.contains("has not come yet"))
        let key = FrameEncryptionKey.random()
        let taken = try ring.received(GroupKeyGrant(room: "5200", epoch: 1, key: key.base64), from: b.fingerprint).get()
        #expect(taken.contains(.openFeed(participant: "20", key)))
        #expect(taken.contains(.feedEvent(participant: "20", .senderKey(who, missing: nil))))
        #expect(ring.feedKey("20") == key)
        // A feed placed once its key is here needs no word: it opens with the key.
        #expect(ring.feedPlaced("20") == [.openFeed(participant: "20", key)])
        // A non-member's feed is silence, and says it cannot be otherwise.
        _ = ring.arrived(Self.participant("40", nil, name: "a browser"))
        guard case let .feedEvent("40", .senderKey(_, why?)) = ring.feedPlaced("40").first else {
            Issue.record("no reason for a non-member's silence")
            return
        }
        #expect(why.contains("not a node of this encrypted group"))
    }

    /// The feed is asked for without the key (made with none), the key comes while the server
    /// sets the feed up (nothing to open yet), then the feed is placed: it opens with the key.
    /// Without this a member's feed stayed silence for the whole call (three nodes in a real
    /// Janus room: b never heard c, about one run in ten).
    @Test func aKeyThatCameWhileItsFeedWasBeingSetUpOpensTheFeedWhenItIsPlaced() throws {
        let c = Self.member(3, port: 7603)
        var ring = GroupKeyRing(room: "5200", me: Self.fingerprint(1))
        _ = ring.arrived(Self.participant("30", c))
        #expect(ring.feedKey("30") == nil, "the feed is made with no key")
        let key = FrameEncryptionKey.random()
        #expect(try ring.received(GroupKeyGrant(room: "5200", epoch: 1, key: key.base64), from: c.fingerprint).get()
            .contains(.openFeed(participant: "30", key)), "said, but the node has no feed for it yet")
        #expect(ring.feedPlaced("30") == [.openFeed(participant: "30", key)])
    }

    @Test func aKeyThatCameBeforeItsMemberOpensTheFeedWhenTheMemberArrives() throws {
        let b = Self.member(2, port: 7602)
        var ring = GroupKeyRing(room: "5200", me: Self.fingerprint(1))
        let key = FrameEncryptionKey.random()
        #expect(try ring.received(GroupKeyGrant(room: "5200", epoch: 1, key: key.base64), from: b.fingerprint).get().isEmpty)
        #expect(ring.arrived(Self.participant("20", b)).contains(.openFeed(participant: "20", key)))
        #expect(ring.feedKey("20") == key)
    }

    @Test func aMemberLeavingMakesANewKeyForThoseWhoStayAndDropsItsOwn() throws {
        let b = Self.member(2, port: 7602), c = Self.member(3, port: 7603)
        var ring = GroupKeyRing(room: "5200", me: Self.fingerprint(1))
        _ = ring.arrived(Self.participant("20", b))
        _ = ring.arrived(Self.participant("30", c))
        _ = try ring.received(GroupKeyGrant(room: "5200", epoch: 1, key: FrameEncryptionKey.random().base64), from: c.fingerprint).get()
        let before = ring.ownKey
        let actions = ring.departed("30")
        guard case let .rotate(key, grant, staying) = actions.first else {
            Issue.record("no new key when a member left: \(actions)")
            return
        }
        #expect(key != before && key == ring.ownKey)
        #expect(grant == GroupKeyGrant(room: "5200", epoch: 2, key: key.base64))
        #expect(staying == [b])
        #expect(ring.receivedKeys[c.fingerprint] == nil)
        #expect(ring.memberCount == 2)
        // A participant that was never a member leaves: no new key.
        _ = ring.arrived(Self.participant("40", nil))
        #expect(ring.departed("40").isEmpty)
        #expect(ring.departed("99").isEmpty)
    }

    @Test func anOlderKeyNeverReplacesANewerOneAndStrangeGrantsAreRefused() throws {
        let b = Self.member(2, port: 7602)
        let me = Self.fingerprint(1)
        var ring = GroupKeyRing(room: "5200", me: me)
        _ = ring.arrived(Self.participant("20", b))
        let newer = FrameEncryptionKey.random(), older = FrameEncryptionKey.random()
        _ = try ring.received(GroupKeyGrant(room: "5200", epoch: 3, key: newer.base64), from: b.fingerprint).get()
        #expect(try ring.received(GroupKeyGrant(room: "5200", epoch: 2, key: older.base64), from: b.fingerprint).get().isEmpty)
        #expect(ring.feedKey("20") == newer)
        #expect(throws: GroupKeyRefusal.self) { try ring.received(GroupKeyGrant(room: "9999", epoch: 1, key: newer.base64), from: b.fingerprint).get() }
        #expect(throws: GroupKeyRefusal.self) { try ring.received(GroupKeyGrant(room: "5200", epoch: 4, key: "c2hvcnQ="), from: b.fingerprint).get() }
        #expect(throws: GroupKeyRefusal.self) { try ring.received(GroupKeyGrant(room: "5200", epoch: 4, key: newer.base64), from: me).get() }
    }
}
