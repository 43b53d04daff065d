import Crypto
import Foundation
import NIOHTTP1

/// Who may use a control API served over TCP: a program that presents the token
/// (`Authorization: Bearer`), or the console page in a browser that signed in with it.
///
/// Signing in (`POST /console/session` with `{"token": …}`) sets an HttpOnly cookie holding an
/// HMAC of the token, never the token: nothing the page or its URLs hold can be replayed as the
/// token, and the cookie outlives a restart of the node (same token, same cookie), so the console
/// reconnects without asking again. A write the cookie authorises must also carry
/// `X-CallNode-Console`: another site's page cannot make a browser send that header to the node
/// (it would need a CORS preflight, which the node never grants), and the cookie is
/// `SameSite=Strict` besides.
struct ConsoleAccess: Sendable {
    static let sessionPath = "/console/session"
    static let cookieName = "callnode_console"
    static let writeHeader = "X-CallNode-Console"

    private let token: [UInt8]
    private let cookieValue: [UInt8]

    init(token: [UInt8]) {
        self.token = token
        let code = HMAC<SHA256>.authenticationCode(for: Array("callnode console session v1".utf8), using: SymmetricKey(data: token))
        cookieValue = Array(code.map { String(format: "%02x", $0) }.joined().utf8)
    }

    /// Whether the request may be answered.
    func allows(_ head: HTTPRequestHead) -> Bool {
        if let header = head.headers.first(name: "Authorization"), header.hasPrefix("Bearer ") {
            return Self.equal(Array(header.dropFirst(7).utf8), token)
        }
        guard let cookie = Self.cookie(Self.cookieName, in: head.headers), Self.equal(Array(cookie.utf8), cookieValue) else { return false }
        return head.method == .GET || head.headers.contains(name: Self.writeHeader)
    }

    /// `POST /console/session` (sign in: the token in the body) or `DELETE` (sign out).
    func session(_ request: ControlRequest) -> ControlResponse {
        switch request.method {
        case "POST":
            guard case let .success(body) = ControlAPI.parseBody(request.body), let given = body["token"] as? String else {
                return .error(400, "give the control token: {\"token\": \"…\"}")
            }
            guard Self.equal(Array(given.utf8), token) else { return .error(401, "that is not this node's control token") }
            let cookie = "\(Self.cookieName)=\(String(decoding: cookieValue, as: UTF8.self)); Path=/; HttpOnly; SameSite=Strict"
            return ControlResponse(status: 204, contentType: "application/json", body: [], headers: [("Set-Cookie", cookie)])
        case "DELETE":
            return Self.signedOut
        default:
            return .error(405, "\(request.method) is not served at \(Self.sessionPath) (it takes POST, DELETE)")
        }
    }

    /// Sign-out's answer: the cookie expired. (Also what a node without a token answers to
    /// either: there is nothing to sign in to.)
    static let signedOut = ControlResponse(status: 204, contentType: "application/json", body: [],
                                           headers: [("Set-Cookie", "\(cookieName)=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")])

    /// The value of the cookie `name` in the request's `Cookie` headers.
    static func cookie(_ name: String, in headers: HTTPHeaders) -> String? {
        for header in headers[canonicalForm: "Cookie"] {
            for pair in header.split(separator: ";") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == name {
                    return parts[1].trimmingCharacters(in: .whitespaces)
                }
            }
        }
        return nil
    }

    /// Compares in time that does not depend on where a guess differs.
    static func equal(_ given: [UInt8], _ expected: [UInt8]) -> Bool {
        var difference = UInt8(given.count == expected.count ? 0 : 1)
        for i in 0..<max(given.count, expected.count) {
            difference |= (i < given.count ? given[i] : 0) ^ (i < expected.count ? expected[i] : 0)
        }
        return difference == 0
    }
}
