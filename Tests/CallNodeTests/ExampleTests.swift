import CallNodeTestSupport
import Foundation
import Testing

/// The examples in `Examples/` run as a reader would run them (`swift run two-nodes`), and
/// what they print is what they promise: each finishes by itself. (`answering-service` runs in
/// `ServiceTests`.)
extension RealTimeTests {
@Suite(.serialized) struct ExampleTests {
    /// Runs an example; its exit status and what it printed (stdout and stderr).
    static func run(_ name: String) async throws -> (status: Int32, output: String) {
        let log = "/tmp/callnode-example-\(getpid())-\(name).log"
        defer { unlink(log) }
        // Each example ends in seconds: one that hangs is stopped and fails (and says what it printed).
        let status: Int32
        do {
            status = try await ChildProcess.running(try BuildProducts.executable(name), [], output: log, limit: .seconds(120))
        } catch {
            throw TestFailure("\(error): \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        }
        return (status, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
    }

    /// The first integer after `prefix` in `text`.
    static func number(after prefix: String, in text: String) -> Double? {
        guard let range = text.range(of: prefix) else { return nil }
        let rest = text[range.upperBound...].drop { $0 == " " }
        return Double(rest.prefix { $0.isNumber || $0 == "-" || $0 == "." })
    }

    @Test func iceLoopbackConnectsTwoAgentsAndCarriesDatagrams() async throws {
        let (status, output) = try await Self.run("ice-loopback")
        #expect(status == 0, "\(output)")
        #expect(output.contains("connected: host 127.0.0.1:"), "\(output)")
        for n in 1...3 { #expect(output.contains("b received: hello \(n)"), "\(output)") }
    }

    @Test func twoNodesCallRecordsTheCallAndSaysSoOnce() async throws {
        let (status, output) = try await Self.run("two-nodes")
        #expect(status == 0, "\(output)")
        #expect(output.contains("alice: connected in"), "\(output)")
        #expect(output.contains("alice: ended (localEnded)"), "\(output)")
        // Once: it was printed twice before (issue item 10).
        #expect(output.components(separatedBy: "hanging up").count - 1 == 1, "\(output)")
        let recorded = Self.number(after: "bob recorded", in: output) ?? 0
        #expect(recorded >= 1_900, "bob recorded \(recorded) ms of a 2 s call")
    }

    @Test func theOwnershipStudyShowsTheBugSilencesTheMicrophoneAndOneOwnerDoesNot() async throws {
        let (status, output) = try await Self.run("ownership-study")
        #expect(status == 0, "\(output)")
        // 1b: two activations, the far end hears nothing; one activation, it hears the tone.
        #expect(output.contains("heard RMS 0"), "\(output)")
        #expect((Self.number(after: "and RMS", in: output) ?? 0) > 1_000, "\(output)")
        // 1c: on whole nodes, the same.
        #expect(output.contains("hears Bob at -100.0 dB"), "\(output)")
        #expect((Self.number(after: "(1 activation):", in: output) ?? 0) > 50, "\(output)")
        // The last "Bob at" is the one-activation run's level.
        let oneActivation = output.range(of: "Bob at -", options: .backwards).map { output[$0.upperBound...].prefix { $0.isNumber || $0 == "." } }
        #expect(oneActivation.flatMap { Double($0) }.map { $0 < 40 } == true, "one activation: Bob at -\(oneActivation ?? "?") dB")
        // 2 and 3: one owner each.
        #expect(output.contains("session active: true — activated once, by the provider"), "\(output)")
        #expect(output.contains("activate() again → refused"), "\(output)")
    }

    @Test func twoPhonesCallHearEachOtherSendDigitsHoldAndEnd() async throws {
        let (status, output) = try await Self.run("two-phones")
        #expect(status == 0, "\(output)")
        #expect((Self.number(after: "alice's microphone, RMS", in: output) ?? 0) > 1_000, "\(output)")
        for digit in ["4", "2", "#"] { #expect(output.contains("[bob] heard DTMF \(digit)"), "\(output)") }
        #expect(output.contains("[alice] resume: fulfilled (no second activation)"), "\(output)")
        #expect(output.contains("[alice] end: fulfilled"), "\(output)")
    }
}
}
