/// RFC 6464's client-to-mixer audio level (`urn:ietf:params:rtp-hdrext:ssrc-audio-level`) in
/// SDP (RFC 8285's `a=extmap`): offered where a mixer wants to know who talks, kept when the
/// answer names it on the offered id.
public enum AudioLevelExtension {
    public static let uri = "urn:ietf:params:rtp-hdrext:ssrc-audio-level"

    /// Adds `a=extmap:ID URI` to the description's audio stream (nothing for a nil id).
    static func offer(_ id: Int?, in description: inout SessionDescription) {
        guard let id, let index = description.media.firstIndex(where: { $0.media == "audio" }) else { return }
        description.media[index].attributes.append(SDPAttribute("extmap", "\(id) \(uri)"))
    }

    /// The extension's id in `answer` when `offer` carried it on the same id (RFC 8285 lets an
    /// answer use only what was offered): nil otherwise.
    static func accepted(offer: MediaDescription, answer: MediaDescription) -> Int? {
        guard let offered = id(in: offer), let answered = id(in: answer), offered == answered else { return nil }
        return answered
    }

    /// The id an `a=extmap` of `media` gives the audio level (`a=extmap:ID[/direction] URI`).
    static func id(in media: MediaDescription) -> Int? {
        for attribute in media.attributes where attribute.name == "extmap" {
            guard let value = attribute.value else { continue }
            let fields = value.split(separator: " ")
            guard fields.count >= 2, fields[1] == uri, let id = Int(fields[0].split(separator: "/")[0]), (1...14).contains(id) else { continue }
            return id
        }
        return nil
    }
}
