import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
@testable import NodeControl
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The console's files and its sign-in, as curl sees them: the page is served to anyone (it
/// holds no secret) under a strict policy; over TCP the API answers only the token or the
/// cookie signing in with it set, which is not the token, needs a header of the console's for
/// writes, and outlives a restart of the node with the same token.
@Suite struct ConsoleServerTests {
    static func curl(_ arguments: [String]) async throws -> (status: Int, headers: [String: String], body: String) {
        try await ControlRequests.exchange(arguments)
    }

    @Test func thePageIsServedToAnyoneAndTheAPIOnlyToItsTokenOrTheCookieSigningInSets() async throws {
        let f = try InMemoryNodes()
        let bob = try await f.node("bob")
        let token = "console-\(UUID().uuidString)"
        let (server, serving) = try await ControlServerTests.serve(bob, at: .tcp(host: "127.0.0.1", port: 0), token: token)
        guard case let .tcp(_, port) = server.address else { throw TestFailure("not TCP") }
        let base = "http://127.0.0.1:\(port)"
        let jar = "/tmp/cn-jar-\(UUID().uuidString.prefix(8))"
        defer { unlink(jar) }

        // The page and its files, without a token, under a policy that allows only its own.
        let page = try await Self.curl(["\(base)/console/"])
        #expect(page.status == 200 && page.headers["content-type"]?.hasPrefix("text/html") == true)
        #expect(page.body.contains("console.js") && page.headers["content-security-policy"]?.contains("default-src 'self'") == true)
        #expect(try await Self.curl(["\(base)/console/console.js"]).headers["content-type"]?.hasPrefix("text/javascript") == true)
        #expect(try await Self.curl(["\(base)/console/console.css"]).status == 200)
        let root = try await Self.curl(["\(base)/"])
        #expect(root.status == 302 && root.headers["location"] == "/console/")
        // The API is not.
        let refused = try await Self.curl(["\(base)/v1/node"])
        #expect(refused.status == 401 && refused.body.contains("control token") && !refused.body.contains(bob.identity.fingerprint.hex))

        // A wrong token signs nobody in; the right one sets a cookie that is not the token.
        let wrong = try await Self.curl(["-c", jar, "-X", "POST", "-d", #"{"token": "guess"}"#, "\(base)/console/session"])
        #expect(wrong.status == 401 && wrong.headers["set-cookie"] == nil)
        let malformed = try await Self.curl(["-c", jar, "-X", "POST", "-d", "token=\(token)", "\(base)/console/session"])
        #expect(malformed.status == 400 && malformed.headers["set-cookie"] == nil)
        let signedIn = try await Self.curl(["-c", jar, "-X", "POST", "-d", "{\"token\": \"\(token)\"}", "\(base)/console/session"])
        #expect(signedIn.status == 204)
        let cookie = try #require(signedIn.headers["set-cookie"])
        #expect(cookie.hasPrefix("callnode_console=") && cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"))
        #expect(!cookie.contains(token) && !cookie.contains(String(token.suffix(12))))

        // The cookie reads; it writes only with the console's header.
        let node = try await Self.curl(["-b", jar, "\(base)/v1/node"])
        #expect(node.status == 200 && node.body.contains(bob.identity.fingerprint.hex))
        let forged = try await Self.curl(["-b", jar, "-X", "PUT", "-d", #"{"on": true}"#, "\(base)/v1/do-not-disturb"])
        #expect(forged.status == 401)
        #expect(await bob.manager.isDoNotDisturbOn == false)
        let written = try await Self.curl(["-b", jar, "-H", "X-CallNode-Console: 1", "-X", "PUT", "-d", #"{"on": true}"#, "\(base)/v1/do-not-disturb"])
        #expect(written.status == 200 && written.body.contains("\"do_not_disturb\":true"), "\(written)")
        #expect(await bob.manager.isDoNotDisturbOn)
        // A malformed action and an unknown call get a reason; the server serves on.
        let bad = try await Self.curl(["-b", jar, "-H", "X-CallNode-Console: 1", "-X", "POST", "-d", "{not json", "\(base)/v1/drain"])
        #expect(bad.status == 400 && bad.body.contains("not JSON"))
        let unknown = try await Self.curl(["-b", jar, "-H", "X-CallNode-Console: 1", "-X", "POST", "\(base)/v1/calls/\(UUID().uuidString)/hangup"])
        #expect(unknown.status == 404 && unknown.body.contains("no call"))

        // The same token after a restart: the cookie still signs in. Another token: it does not.
        serving.cancel()
        await server.close()
        let (again, servingAgain) = try await ControlServerTests.serve(bob, at: .tcp(host: "127.0.0.1", port: port), token: token)
        #expect(try await Self.curl(["-b", jar, "\(base)/v1/node"]).status == 200)
        servingAgain.cancel()
        await again.close()
        let (other, servingOther) = try await ControlServerTests.serve(bob, at: .tcp(host: "127.0.0.1", port: port), token: token + "-new")
        #expect(try await Self.curl(["-b", jar, "\(base)/v1/node"]).status == 401)

        // Signing out expires the cookie.
        let out = try await Self.curl(["-b", jar, "-c", jar, "-X", "DELETE", "\(base)/console/session"])
        #expect(out.status == 204 && out.headers["set-cookie"]?.contains("Max-Age=0") == true)
        servingOther.cancel()
        await other.close()
        await f.shutdown()
    }

    @Test func onTheUnixSocketThereIsNothingToSignInTo() async throws {
        let f = try InMemoryNodes()
        let bob = try await f.node("bob")
        let path = ControlRequests.socketPath()
        let (server, serving) = try await ControlServerTests.serve(bob, at: .unix(path))
        #expect(try await Self.curl(["--unix-socket", path, "http://node/console/"]).status == 200)
        #expect(try await Self.curl(["--unix-socket", path, "-X", "POST", "-d", #"{"token": "x"}"#, "http://node/console/session"]).status == 204)
        #expect(try await Self.curl(["--unix-socket", path, "http://node/v1/node"]).status == 200)
        serving.cancel()
        await server.close()
        await f.shutdown()
    }
}
