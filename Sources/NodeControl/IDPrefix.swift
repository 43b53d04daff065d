import Foundation

/// Naming a call by its ID or any start of it no other shares, as every request and command
/// does: the one match, none, or how many share the start.
public enum IDPrefixMatch<Item> {
    case one(Item)
    case none
    case several(Int)

    /// The item among `items` that `text` names: its whole UUID (in any case), or a start of it
    /// (case-insensitive) that no other item's shares. An empty start names none.
    public init(_ text: String, in items: [Item], id: (Item) -> UUID) {
        if let uuid = UUID(uuidString: text) {
            self = items.first { id($0) == uuid }.map(Self.one) ?? .none
            return
        }
        let wanted = text.lowercased()
        let matching = wanted.isEmpty ? [] : items.filter { id($0).uuidString.lowercased().hasPrefix(wanted) }
        switch matching.count {
        case 0: self = .none
        case 1: self = .one(matching[0])
        default: self = .several(matching.count)
        }
    }
}
