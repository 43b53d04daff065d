/// What a description says of its audio stream, read the way offers and answers read it.
extension SessionDescription {
    /// Whether the audio stream speaks ICE (has `a=ice-ufrag` and `a=ice-pwd`).
    public var audioUsesICE: Bool {
        guard let media = media.first(where: { $0.media == "audio" })?.inheriting(from: self) else { return false }
        return media.iceUfrag != nil && media.icePwd != nil
    }

    /// Whether the audio stream is plain RTP: no `a=crypto`, no `a=fingerprint`, an unsecured
    /// profile (`RTP/AVP`). `false` when there is no audio stream.
    public var audioIsPlainRTP: Bool {
        guard let media = media.first(where: { $0.media == "audio" }) else { return false }
        return OfferAnswer.isPlain(self, media: media)
    }
}

extension MediaDescription {
    /// The attributes RFC 8839 lets a description give once for all its streams (`ice-ufrag`,
    /// `ice-pwd`, `ice-options`, `ice-lite`), taken from the session level where this stream
    /// does not give its own: baresip, for one, puts its ICE credentials there.
    func inheriting(from description: SessionDescription) -> MediaDescription {
        var media = self
        for name in ["ice-ufrag", "ice-pwd", "ice-options", "ice-lite"] where media.attribute(name) == nil {
            if let attribute = description.attribute(name) { media.attributes.append(attribute) }
        }
        return media
    }
}
