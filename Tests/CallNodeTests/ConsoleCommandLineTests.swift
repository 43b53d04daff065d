import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension RealTimeTests {
/// `callnode listen --console HOST:PORT` as a person runs it: the console beside the control
/// socket, on loopback only, behind a token the node keeps in its home for its user alone,
/// which a restart keeps (a signed-in browser stays signed in).
@Suite(.serialized) struct ConsoleCommandLineTests {
    @Test func aNodeServesItsConsoleOnLoopbackBehindATokenItKeepsForItsUser() async throws {
        let directory = try ControlCommandLineTests.Directory()
        let refused = try await ControlCommandLineTests.callnode(
            ["listen", "--home", directory.path + "/x", "--listen", "127.0.0.1:0", "--console", "0.0.0.0:8089"], in: directory)
        #expect(refused.status != 0 && refused.output.contains("loopback"), "\(refused.output)")

        let port = FreePort.udpAndTCP()
        var bob = try await ControlCommandLineTests.listener("bob", in: directory, ["--input", "silence", "--console", "127.0.0.1:\(port)"])
        let url = "http://127.0.0.1:\(port)/console/"
        let announced = try await CommandLineTests.waitForLine(in: bob.log, process: bob.0) { $0.contains("\"console\"") }
        #expect(CommandLineTests.jsonLines(announced).first?["url"] as? String == url, "\(announced)")
        // The token: in the home, this user's only; never printed.
        let tokenFile = bob.home + "/console-token"
        var info = stat()
        #expect(stat(tokenFile, &info) == 0 && info.st_mode & 0o777 == 0o600)
        let token = try String(contentsOfFile: tokenFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let log = try String(contentsOfFile: bob.log, encoding: .utf8)
        #expect(token.count == 64 && !log.contains(token))

        // The page, to anyone; the API, to the token (the socket still serves as before).
        #expect(try await ControlRequests.exchange([url]).status == 200)
        #expect(try await ControlRequests.exchange(["http://127.0.0.1:\(port)/v1/node"]).status == 401)
        let jar = directory.path + "/jar"
        let signedIn = try await ControlRequests.exchange(["-c", jar, "-X", "POST", "-d", "{\"token\": \"\(token)\"}", "http://127.0.0.1:\(port)/console/session"])
        #expect(signedIn.status == 204)
        #expect(try await ControlRequests.exchange(["-b", jar, "http://127.0.0.1:\(port)/v1/node"]).body.contains("\"taking_calls\""))
        #expect(try await ControlCommandLineTests.callnode(["ctl", "calls", "--home", bob.home], in: directory).status == 0)

        // Restarted, the node keeps its token: the browser's cookie still signs it in.
        bob.0.stop()
        try FileManager.default.moveItem(atPath: bob.log, toPath: bob.log + ".1")  // the next run's lines alone
        bob = try await ControlCommandLineTests.listener("bob", in: directory, ["--input", "silence", "--console", "127.0.0.1:\(port)"])
        defer { bob.0.stop() }
        _ = try await CommandLineTests.waitForLine(in: bob.log, process: bob.0) { $0.contains("\"console\"") }
        let kept = try String(contentsOfFile: tokenFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(kept == token)
        #expect(try await ControlRequests.exchange(["-b", jar, "http://127.0.0.1:\(port)/v1/node"]).status == 200)
    }
}
}
