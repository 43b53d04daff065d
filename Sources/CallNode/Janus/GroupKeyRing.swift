import CallCore
import Foundation
import Media
import Signaling

/// A member of an end-to-end encrypted group as its room shows it: the display name Janus
/// carries also says who the member is and where its node takes keys,
/// `NAME · callnode FINGERPRINT@HOST:PORT`. What the room says is not trusted for the keys:
/// they go only to that identity (the connection is pinned to it), and the group's security
/// code, from every member's identity, shows a member the room slipped in.
struct GroupMember: Sendable, Hashable {
    var fingerprint: Fingerprint
    var address: SignalAddress

    private static let tag = " · callnode "

    /// The name a display gives, without a member's identity and address.
    static func name(in display: String) -> String {
        display.range(of: tag, options: .backwards).map { String(display[..<$0.lowerBound]) } ?? display
    }

    /// The display name that makes this member known in the room.
    func display(name: String) -> String { "\(name)\(Self.tag)\(fingerprint.hex)@\(address)" }

    init(fingerprint: Fingerprint, address: SignalAddress) {
        self.fingerprint = fingerprint
        self.address = address
    }

    /// Nil for a participant that is not a node of the group (a browser, a node of an older
    /// version): it sends no key, and its frames cannot be opened.
    init?(display: String?) {
        guard let display, let tag = display.range(of: Self.tag, options: .backwards) else { return nil }
        let rest = display[tag.upperBound...]
        guard let at = rest.firstIndex(of: "@"), let fingerprint = Fingerprint(String(rest[..<at])),
              let address = SignalAddress(String(rest[rest.index(after: at)...])) else { return nil }
        self.init(fingerprint: fingerprint, address: address)
    }
}

/// An end-to-end encrypted group's keys, decided as a value (the node performs what it says).
///
/// Each member seals what it sends with a sender key of its own (``FrameCipher``'s frames, as
/// between two nodes) and sends that key to each other member's node over the node's signaling
/// (``GroupKeyGrant``), inside TLS pinned to that member's identity: the server forwarding
/// the frames never holds a key. A member's feed opens with the key its publisher sent. When
/// a member leaves, each of the others makes a new sender key and sends it to those who stay,
/// and seals with it once they have it: the one who left cannot open what follows. Until a
/// member's key is here its feed is silence, and the room's events say why.
struct GroupKeyRing: Sendable {
    enum Action: Sendable, Equatable {
        /// Send this member our sender key.
        case send(GroupKeyGrant, to: GroupMember)
        /// A member left: send each member who stays our new sender key, then seal with it.
        case rotate(FrameEncryptionKey, GroupKeyGrant, to: [GroupMember])
        /// Open this participant's feed with its publisher's key (from now on).
        case openFeed(participant: String, FrameEncryptionKey)
        /// Tell the group's call (the publishing one) this.
        case groupEvent(RoomEvent)
        /// Tell this participant's feed this.
        case feedEvent(participant: String, RoomEvent)
    }

    /// The room, as the grants name it.
    let room: String
    let me: Fingerprint
    /// What this member seals with now, and how many keys it made before it.
    private(set) var ownKey = FrameEncryptionKey.random()
    private(set) var epoch = 1
    /// Everyone else in the room, by the room's id for them (nil member: not a node of the group).
    private var present: [String: (participant: RoomParticipant, member: GroupMember?)] = [:]
    /// The newest key each member sent (kept for a member whose arrival the room has not told yet).
    private var received: [Fingerprint: (epoch: Int, key: FrameEncryptionKey)] = [:]
    /// Feeds whose silence was explained, to say when they are heard.
    private var silent: Set<String> = []

    init(room: String, me: Fingerprint) {
        self.room = room
        self.me = me
    }

    /// The code every member sees.
    var securityCode: String { SecurityCode.group([me] + present.values.compactMap(\.member?.fingerprint)) }
    var memberCount: Int { 1 + present.values.filter { $0.member != nil }.count }

    private var grant: GroupKeyGrant { GroupKeyGrant(room: room, epoch: epoch, key: ownKey.base64) }
    private var secured: Action { .groupEvent(.groupSecured(securityCode: securityCode, members: memberCount)) }

    /// The newest key each member sent.
    var receivedKeys: [Fingerprint: FrameEncryptionKey] { received.mapValues(\.key) }

    /// The key that opens this participant's feed, if its publisher sent one.
    func feedKey(_ participant: String) -> FrameEncryptionKey? {
        present[participant]?.member.flatMap { received[$0.fingerprint]?.key }
    }

    /// A participant is in the room (there when this member came, or came after).
    mutating func arrived(_ participant: RoomParticipant) -> [Action] {
        guard present[participant.id] == nil else { return [] }
        guard let member = GroupMember(display: participant.name), member.fingerprint != me else {
            present[participant.id] = (participant, nil)
            return []
        }
        present[participant.id] = (participant, member)
        var actions: [Action] = [.send(grant, to: member), secured]
        if let key = received[member.fingerprint]?.key { actions.append(.openFeed(participant: participant.id, key)) }
        return actions
    }

    /// This participant's feed was asked for: without its key it is silence, and says why; with
    /// it, it opens with it. (The feed was made with the key held when it was asked for, and
    /// asking takes a round trip to the server: a key that came meanwhile found no feed to open
    /// and is applied now, or that feed would stay silence for the whole call.)
    mutating func feedPlaced(_ participant: String) -> [Action] {
        guard let entry = present[participant] else { return [] }
        if let key = feedKey(participant) { return [.openFeed(participant: participant, key)] }
        silent.insert(participant)
        let why = entry.member == nil
            ? "it is not a node of this encrypted group (it sends no key), so its frames cannot be opened"
            : "its key has not come yet (its node sends it over this node's signaling)"
        return [.feedEvent(participant: participant, .senderKey(entry.participant, missing: why))]
    }

    /// A participant left: a member's leaving makes a new sender key for those who stay.
    mutating func departed(_ participant: String) -> [Action] {
        guard let entry = present.removeValue(forKey: participant) else { return [] }
        silent.remove(participant)
        guard let member = entry.member else { return [] }
        received[member.fingerprint] = nil
        ownKey = .random()
        epoch += 1
        let staying = present.values.compactMap(\.member)
        return [.rotate(ownKey, grant, to: staying), secured]
    }

    /// A member's node sent its key (`sender`: the identity its connection proved).
    /// - Returns: what to do, or why the key is refused.
    mutating func received(_ grant: GroupKeyGrant, from sender: Fingerprint) -> Result<[Action], GroupKeyRefusal> {
        guard grant.room == room else { return .failure(GroupKeyRefusal("this node is in no encrypted group in room \(grant.room)")) }
        guard sender != me else { return .failure(GroupKeyRefusal("a key from this node itself")) }
        guard let key = try? FrameEncryptionKey(base64: grant.key) else { return .failure(GroupKeyRefusal("the key is not 32 bytes of base64")) }
        if let newest = received[sender], newest.epoch >= grant.epoch { return .success([]) }  // an older key, overtaken
        received[sender] = (grant.epoch, key)
        var actions: [Action] = []
        for (id, entry) in present where entry.member?.fingerprint == sender {
            actions.append(.openFeed(participant: id, key))
            if silent.remove(id) != nil { actions.append(.feedEvent(participant: id, .senderKey(entry.participant, missing: nil))) }
        }
        return .success(actions)
    }
}

/// Why a node did not take a member's key (said back to the sender).
struct GroupKeyRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
