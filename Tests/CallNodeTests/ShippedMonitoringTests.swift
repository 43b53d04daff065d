import CallNodeTestSupport
import Foundation
import Testing

/// What the repository ships for watching nodes: Prometheus alert rules with their unit tests
/// (`contrib/prometheus`) and a Grafana dashboard (`contrib/grafana`), both on the node's own
/// metric names (`OperatorTests` checks each name is exported while a call runs).
enum ShippedMonitoring {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let rules = root.appendingPathComponent("contrib/prometheus/callnode-alerts.yml")
    static let ruleTests = root.appendingPathComponent("contrib/prometheus/callnode-alerts.test.yml")
    static let dashboard = root.appendingPathComponent("contrib/grafana/callnode-dashboard.json")

    /// Every `callnode_…` series name the dashboard's queries and the alert rules use.
    static func metricNames() throws -> Set<String> {
        var names: Set<String> = []
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: dashboard))
        var expressions: [String] = []
        func collect(_ value: Any) {
            if let object = value as? [String: Any] {
                for (key, inner) in object {
                    if key == "expr", let text = inner as? String { expressions.append(text) } else { collect(inner) }
                }
            } else if let array = value as? [Any] {
                array.forEach(collect)
            }
        }
        collect(json)
        let rulesText = try String(contentsOf: rules, encoding: .utf8)
        // The rules' expressions (not their comments).
        expressions += rulesText.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("#") }.map(String.init)
        let pattern = try NSRegularExpression(pattern: "callnode_[a-z_]+")
        for text in expressions {
            for match in pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                names.insert(String(text[Range(match.range, in: text)!]))
            }
        }
        return names
    }
}

@Suite struct ShippedMonitoringTests {
    static let promtool = "/usr/bin/promtool"

    /// The rules load, and their unit tests (each alert firing on synthetic series, and not
    /// firing below its threshold) pass.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: promtool), "needs promtool (scripts/bootstrap installs prometheus)"))
    func theAlertRulesCheckAndPassTheirUnitTests() async throws {
        let log = "/tmp/callnode-promtool-\(getpid())-\(UUID().uuidString.prefix(8)).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let checked = try await ChildProcess.running(Self.promtool, ["check", "rules", ShippedMonitoring.rules.path], output: log)
        let checkOutput = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(checked == 0 && checkOutput.contains("SUCCESS"), "\(checkOutput)")
        let tested = try await ChildProcess.running(Self.promtool, ["test", "rules", ShippedMonitoring.ruleTests.path], output: log)
        let testOutput = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(tested == 0 && testOutput.contains("SUCCESS"), "\(testOutput)")
    }

    /// Each alert the rules define has unit tests that see it fire and see it stay quiet.
    @Test func everyAlertIsTestedFiringAndQuiet() throws {
        let rules = try String(contentsOf: ShippedMonitoring.rules, encoding: .utf8)
        let tests = try String(contentsOf: ShippedMonitoring.ruleTests, encoding: .utf8)
        let alerts = rules.split(separator: "\n").compactMap { line -> String? in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            return trimmed.hasPrefix("- alert: ") ? String(trimmed.dropFirst("- alert: ".count)) : nil
        }
        #expect(alerts.count >= 6, "\(alerts)")
        for alert in alerts {
            #expect(tests.contains("alertname: \(alert)"), "no unit test for \(alert)")
        }
        #expect(tests.contains("exp_alerts: []"), "no case where an alert stays quiet")
    }

    @Test func theDashboardQueriesOnlyTheNodesMetrics() throws {
        let names = try ShippedMonitoring.metricNames()
        #expect(names.contains("callnode_calls") && names.contains("callnode_call_loss_ratio"), "\(names.sorted())")
        // Histograms are queried by their buckets (the bare name is not a series).
        #expect(!names.contains("callnode_call_setup_seconds"), "\(names.sorted())")
    }
}
