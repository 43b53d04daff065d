import Foundation

/// The page `callnode web` serves: plain HTML and JavaScript, no build step, no outside
/// resources. It speaks the node's own signaling envelopes over the WebSocket and WebRTC
/// (DTLS-SRTP, Opus, trickle ICE) on the media path.
///
/// The fragment carries settings, so they never reach a server log: `#secret=…` (required),
/// `name=…`, and for unattended use `call=1` (call as soon as connected), `answer=1` (answer
/// the node's calls at once), `hangup=SECONDS` (hang up that long after connecting),
/// `stats=1` (log `callnode-stats {json}` every second on the console) and `raw=1` (the
/// microphone without the browser's echo cancellation, noise suppression and gain control).
///
/// Frames are encrypted end to end when the node sends keys (`a=callnode-frame-keys`, over
/// the authenticated WebSocket) and the browser has an encoded-transform API
/// (RTCRtpScriptTransform, or Chromium's encoded streams): the node's format, AES-256-GCM with
/// the tag and a 4-byte counter after the ciphertext. The page shows the security code the node
/// shows, from the node's identity and the page's DTLS certificate.
///
/// The page is two files beside this one, `call.html` and the `call.js` it loads (open
/// `call.html` in a browser to see it as it is); the node carries them in its binary
/// (`PageFiles`, made at build time) and serves them as one document.
enum WebPage {
    /// The script element `call.html` loads `call.js` with.
    static let scriptElement = #"<script src="call.js"></script>"#

    /// The page as served: `call.html` with `call.js` inline in place of its script element,
    /// so a browser fetches nothing else.
    static let html = PageFiles.callHTML.replacingOccurrences(of: scriptElement, with: "<script>\n\(PageFiles.callJS)</script>")
}
