import Foundation

/// A JSON value as Janus's API speaks it: requests are built from these and every reply and
/// event is read into one, so that a malformed or unexpected message is a value to look at,
/// never a crash.
public enum JanusJSON: Sendable, Hashable, Codable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByDictionaryLiteral, ExpressibleByArrayLiteral
{
    case null
    case bool(Bool)
    /// Janus's ids are integers up to 2^53: kept exact, apart from fractions.
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JanusJSON])
    case object([String: JanusJSON])

    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JanusJSON...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JanusJSON)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JanusJSON].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JanusJSON].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case let .bool(value): try container.encode(value)
        case let .integer(value): try container.encode(value)
        case let .number(value): try container.encode(value)
        case let .string(value): try container.encode(value)
        case let .array(value): try container.encode(value)
        case let .object(value): try container.encode(value)
        }
    }

    /// The member `key` of an object (nil for anything else or a missing key).
    public subscript(key: String) -> JanusJSON? {
        if case let .object(members) = self { members[key] } else { nil }
    }

    public var string: String? { if case let .string(value) = self { value } else { nil } }
    public var bool: Bool? { if case let .bool(value) = self { value } else { nil } }
    public var array: [JanusJSON]? { if case let .array(value) = self { value } else { nil } }

    /// An integer (ids and error codes); nil for anything else.
    public var integer: Int64? {
        switch self {
        case let .integer(value): value
        case let .number(value) where value.rounded() == value && abs(value) < 9.0e15: Int64(value)
        default: nil
        }
    }

    /// An id as text: Janus names participants by number, or by string in rooms with string ids.
    public var idText: String? {
        if let integer { return String(integer) }
        return string
    }

    /// Reads JSON text; nil for text that is not JSON.
    public static func parse(_ bytes: [UInt8]) -> JanusJSON? {
        try? JSONDecoder().decode(JanusJSON.self, from: Data(bytes))
    }

    /// The value as compact JSON text (keys sorted).
    public var serialized: [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? Array(encoder.encode(self))) ?? Array("null".utf8)
    }

    /// The object with `key` set (or removed, for nil); anything but an object is returned as it is.
    public func setting(_ key: String, _ value: JanusJSON?) -> JanusJSON {
        guard case var .object(members) = self else { return self }
        members[key] = value
        return .object(members)
    }
}
