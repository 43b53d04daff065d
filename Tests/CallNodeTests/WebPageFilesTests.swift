@testable import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The call page is two files in the repository, `Sources/CallNode/Page/call.html` and the
/// `call.js` it loads; the node carries them in its binary (made at build time) and serves them
/// as one document. These tests read the files and the page a node serves.
@Suite struct WebPageFilesTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources/CallNode/Page")

    static func file(_ name: String) throws -> String {
        try String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8)
    }

    /// What the node serves is the two files, byte for byte: the HTML with the script inline
    /// where it loads it, nothing dropped or escaped on the way into the binary.
    @Test func theServedPageIsTheFilesWithTheScriptInline() throws {
        let html = try Self.file("call.html"), script = try Self.file("call.js")
        #expect(html.components(separatedBy: WebPage.scriptElement).count == 2, "call.html loads call.js exactly once")
        #expect(!script.contains("</script>"), "call.js would end its inline script element early")
        #expect(html.contains("<!DOCTYPE html>") && script.contains("RTCPeerConnection"), "the files were not read")
        #expect(PageFiles.callHTML == html && PageFiles.callJS == script, "the binary carries other files than the repository's")
        let served = WebPage.html
        #expect(served == html.replacingOccurrences(of: WebPage.scriptElement, with: "<script>\n\(script)</script>"))
        #expect(!served.contains(WebPage.scriptElement), "the served page would fetch call.js")
    }

    /// A node serving the page answers `GET /` with it, as a browser gets it.
    @Test func aNodeServesThePageItCarries() async throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-page-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: home) }
        var configuration = CallNodeConfiguration(home: home)
        configuration.listenAddress = nil
        configuration.audio = NodeAudioBackend(input: .silence, output: .null)
        let node = try await CallNode(configuration: configuration)
        await node.start()
        let address = try await node.serveWeb(host: "127.0.0.1", port: 0, secret: "a-secret-of-sixteen-characters")
        let (body, response) = try await URLSession.shared.data(from: try #require(URL(string: "http://127.0.0.1:\(address.port)/")))
        await node.shutdown()
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect((response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Type")?.hasPrefix("text/html") == true)
        #expect(String(decoding: body, as: UTF8.self) == WebPage.html)
    }
}
