/// `a=callnode-frame-key:v1 SHARE required|preferred` on the audio section: this side encrypts
/// frames end to end and offers (or answers with) its key share for the call. A side that
/// cannot or will not leaves it out; browsers ignore it (the page gets its keys over its
/// WebSocket instead).
public struct FrameKeyAttribute: Sendable, Equatable {
    public static let name = "callnode-frame-key"
    /// The sender's X25519 public key, base64.
    public var share: String
    /// The sender refuses a call whose frames are not encrypted end to end.
    public var required: Bool

    public init(share: String, required: Bool) {
        self.share = share
        self.required = required
    }

    /// Parses an attribute value; nil if it is not version 1 with a share.
    public init?(value: String) {
        let parts = value.split(separator: " ")
        guard parts.count >= 2, parts[0] == "v1", !parts[1].isEmpty, parts[1].count <= 128 else { return nil }
        share = String(parts[1])
        required = parts.count > 2 && parts[2] == "required"
    }

    public var value: String { "v1 \(share) \(required ? "required" : "preferred")" }
}

extension SessionDescription {
    /// The audio section's frame key attribute, if any; setting it replaces it (nil removes it).
    public var frameKey: FrameKeyAttribute? {
        get {
            guard let audio = media.first(where: { $0.media == "audio" }),
                  let value = audio.attributes.first(where: { $0.name == FrameKeyAttribute.name })?.value else { return nil }
            return FrameKeyAttribute(value: value)
        }
        set {
            guard let index = media.firstIndex(where: { $0.media == "audio" }) else { return }
            media[index].attributes.removeAll { $0.name == FrameKeyAttribute.name }
            if let newValue { media[index].attributes.append(SDPAttribute(FrameKeyAttribute.name, newValue.value)) }
        }
    }
}

/// The call page's frame keys: `a=callnode-frame-keys:v1 NODE-TO-PAGE PAGE-TO-NODE` (base64
/// AES-256 keys) in the node's offer or answer to a page — over the page's authenticated
/// WebSocket, which only that page holds — and `a=callnode-frame-keys:v1 accept` in the page's
/// own offer or answer when it can encrypt frames (an encoded-transform API).
public enum PageFrameKeysAttribute {
    public static let name = "callnode-frame-keys"
    public static let accept = "v1 accept"

    public static func keys(_ nodeToPage: String, _ pageToNode: String) -> String { "v1 \(nodeToPage) \(pageToNode)" }
}

extension SessionDescription {
    /// The audio section's page frame keys attribute value, if any; setting replaces it.
    public var pageFrameKeys: String? {
        get {
            media.first(where: { $0.media == "audio" })?.attributes.first(where: { $0.name == PageFrameKeysAttribute.name })?.value
        }
        set {
            guard let index = media.firstIndex(where: { $0.media == "audio" }) else { return }
            media[index].attributes.removeAll { $0.name == PageFrameKeysAttribute.name }
            if let newValue { media[index].attributes.append(SDPAttribute(PageFrameKeysAttribute.name, newValue)) }
        }
    }
}
