import Foundation
@testable import NodeControl
import Testing

/// Naming a call by its ID or a start of it: a whole ID in any case, an unshared start, never
/// an empty one, and how many share an ambiguous start.
@Suite struct IDPrefixTests {
    let ids = [UUID(uuidString: "1A2B3C4D-0000-0000-0000-000000000001")!, UUID(uuidString: "1A2BFFFF-0000-0000-0000-000000000002")!]

    func match(_ text: String) -> String {
        switch IDPrefixMatch(text, in: ids, id: { $0 }) {
        case let .one(id): id.uuidString
        case .none: "none"
        case let .several(count): "several \(count)"
        }
    }

    @Test func aCallIsNamedByItsIDOrAStartNoOtherShares() {
        #expect(match(ids[0].uuidString.lowercased()) == ids[0].uuidString)
        #expect(match("1a2b3") == ids[0].uuidString)
        #expect(match("1A2BF") == ids[1].uuidString)
        #expect(match("1a2b") == "several 2")
        #expect(match("") == "none")
        #expect(match("ff") == "none")
        #expect(match(UUID().uuidString) == "none")
    }
}
