import ArgumentParser
import CallNode
import Foundation
import NodeControl
import Metrics
import Prometheus

/// `--metrics HOST:PORT`: bootstraps swift-metrics with a Prometheus registry and serves it at
/// /metrics. Runs before the node opens, so every metric the node makes lands in the registry.
/// Returns the endpoint (kept open until the process exits), or nil without `--metrics`.
func serveMetrics(_ setup: NodeSetup, json: Bool) async throws -> MetricsEndpoint? {
    guard let address = setup.metrics else { return nil }
    let registry = PrometheusCollectorRegistry()
    MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
    let endpoint: MetricsEndpoint
    do {
        endpoint = try await MetricsEndpoint(host: address.host, port: address.port) {
            var text: [UInt8] = []
            registry.emit(into: &text)
            return text
        }
    } catch {
        printError("callnode: metrics: \(error)")
        throw ExitCode(1)
    }
    let url = "http://\(SignalAddress(host: endpoint.host, port: endpoint.port))/metrics"
    if json {
        let object: [String: Any] = ["event": "metrics", "url": url, "time": Date().timeIntervalSince1970]
        if let data = JSONLine.data(object) {
            FileHandle.standardOutput.write(data)
        }
    } else {
        print("metrics: \(url)")
    }
    return endpoint
}
