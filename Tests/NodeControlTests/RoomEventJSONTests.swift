import CallNode
import Foundation
import NodeControl
import Testing

/// What the control API's event stream says of an encrypted group: its security code and size,
/// and a member heard as silence for want of its key (with the reason), then heard.
@Suite struct RoomEventJSONTests {
    let call = UUID()

    @Test func anEncryptedGroupsCodeAndAMissingKeyAreEvents() throws {
        let secured = try #require(EventJSON.object(.room(call, .groupSecured(securityCode: "607 614 336 696", members: 3))))
        #expect(secured["event"] as? String == "group-secured")
        #expect(secured["securityCode"] as? String == "607 614 336 696" && secured["members"] as? Int == 3)
        let alice = RoomParticipant(id: "12", name: "alice")
        let missing = try #require(EventJSON.object(.room(call, .senderKey(alice, missing: "its key has not come yet"))))
        #expect(missing["event"] as? String == "sender-key" && missing["missing"] as? String == "its key has not come yet")
        #expect((missing["participant"] as? [String: Any])?["id"] as? String == "12")
        let heard = try #require(EventJSON.object(.room(call, .senderKey(alice, missing: nil))))
        #expect(heard["missing"] is NSNull)
        // Each is one line of JSON on the stream.
        for object in [secured, missing, heard] { #expect(JSONSerialization.isValidJSONObject(object)) }
    }
}
