/// The console page's files (``PageFiles``, carried in the binary), served beside the API at
/// `/console/`. They hold no secret, so they are served without the token: the page then asks
/// for it (see ``ConsoleAccess``) when the API answers 401.
enum ConsolePage {
    /// What the page's strict policy allows: its own files and the API, nothing else (no inline
    /// script, no other origin, no framing by another page).
    static let policy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; media-src 'self'; "
        + "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"

    /// The answer to `request` if it asks for one of the page's files (or `/`, which leads there).
    static func answer(_ request: ControlRequest) -> ControlResponse? {
        guard request.method == "GET" else { return nil }
        let file: (type: String, text: String)
        switch request.path {
        case "/", "/console":
            return ControlResponse(status: 302, contentType: "text/plain; charset=utf-8", body: Array("the console: /console/\n".utf8),
                                   headers: [("Location", "/console/")])
        case "/console/", "/console/index.html": file = ("text/html; charset=utf-8", PageFiles.consoleHTML)
        case "/console/console.js": file = ("text/javascript; charset=utf-8", PageFiles.consoleJS)
        case "/console/console.css": file = ("text/css; charset=utf-8", PageFiles.consoleCSS)
        default: return nil
        }
        return ControlResponse(status: 200, contentType: file.type, body: Array(file.text.utf8),
                               headers: [("Content-Security-Policy", policy), ("X-Content-Type-Options", "nosniff"),
                                         ("Referrer-Policy", "no-referrer"), ("Cache-Control", "no-cache")])
    }
}
