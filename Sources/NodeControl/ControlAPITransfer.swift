import CallNode
import Foundation

/// A call's transfer, and naming a second call (an attended transfer's consultation, a merge's other).
extension ControlAPI {
    /// `POST /v1/calls/ID/transfer`: `{"to": "sip:…"}` (blind) or `{"replacing": OTHER}`
    /// (attended: the peer's new call replaces this node's call with the target).
    func transfer(_ call: ObservedCall, body: [String: Any]) async throws {
        let id = call.id
        guard call.hasConnected else {
            throw Problem(status: 409, reason: "the call is \(Self.status(of: call)): only an answered call is transferred")
        }
        if let otherID = body["replacing"] as? String {
            let other = try otherCall(otherID, than: id, "a call is not transferred to itself")
            try await nodeCall { () async throws(CallNodeError) in try await node.transfer(id, replacing: other.id) }
        } else {
            guard let target = body["to"] as? String else {
                throw Problem(status: 400, reason: "give the address to transfer the call to, {\"to\": \"sip:user@host\"}, or the call it replaces, {\"replacing\": ID}")
            }
            try await nodeCall { () async throws(CallNodeError) in try await node.transfer(id, to: target) }
        }
    }

    /// The call `otherID` names (a whole ID or an unambiguous start), which must not be `id`
    /// (`itself` says why).
    func otherCall(_ otherID: String, than id: UUID, _ itself: String) throws -> ObservedCall {
        switch resolve(otherID) {
        case let .success(other):
            guard other.id != id else { throw Problem(status: 409, reason: itself) }
            return other
        case let .failure(problem):
            throw problem
        }
    }
}
