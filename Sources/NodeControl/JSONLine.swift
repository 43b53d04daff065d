import Foundation

/// One `--json` line from the loosely typed objects events are described as.
///
/// Encoded with `JSONEncoder` (sorted keys) through a typed value: `JSONSerialization` took
/// ~650 µs for a statistics line (it boxes every value into Foundation objects), the
/// encoder ~35 µs, and a call writes that line every second for as long as it lasts.
public enum JSONLine {
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        // Paths and addresses as they are written (`/v1/calls`, not `\/v1\/calls`).
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// The object as one line of JSON (with its newline), or nil if it holds something JSON
    /// cannot say.
    public static func data(_ object: [String: Any]) -> Data? {
        guard let value = Value(object), var data = try? encoder.encode(value) else { return nil }
        data.append(0x0A)
        return data
    }

    public enum Value: Encodable, Equatable {
        case string(String), int(Int), double(Double), bool(Bool), null
        case array([Value]), object([String: Value])

        public init?(_ any: Any) {
            switch any {
            case let value as String: self = .string(value)
            case let value as Bool: self = .bool(value)
            case let value as Int: self = .int(value)
            case let value as Double: self = .double(value)
            case let value as Int64: self = .int(Int(value))
            case let value as Int32: self = .int(Int(value))
            case let value as UInt16: self = .int(Int(value))
            case let value as UInt32: self = .int(Int(value))
            case let value as Float: self = .double(Double(value))
            case is NSNull: self = .null
            case let value as [String: Any]:
                var object: [String: Value] = [:]
                for (key, element) in value {
                    guard let converted = Value(element) else { return nil }
                    object[key] = converted
                }
                self = .object(object)
            case let value as [Any]:
                var array: [Value] = []
                for element in value {
                    guard let converted = Value(element) else { return nil }
                    array.append(converted)
                }
                self = .array(array)
            default:
                // An optional that is nil (`Any` holding `Optional.none`) says null.
                let mirror = Mirror(reflecting: any)
                guard mirror.displayStyle == .optional, mirror.children.isEmpty else { return nil }
                self = .null
            }
        }

        public func encode(to encoder: any Encoder) throws {
            switch self {
            case let .string(value): var c = encoder.singleValueContainer(); try c.encode(value)
            case let .int(value): var c = encoder.singleValueContainer(); try c.encode(value)
            case let .double(value): var c = encoder.singleValueContainer(); try c.encode(value)
            case let .bool(value): var c = encoder.singleValueContainer(); try c.encode(value)
            case .null: var c = encoder.singleValueContainer(); try c.encodeNil()
            case let .array(values): try values.encode(to: encoder)
            case let .object(values): try values.encode(to: encoder)
            }
        }
    }
}
