internal import CNice
import Foundation
import POSIX

/// The loopback connect of `callnode-bench ice` done with bare libnice calls on one thread: the
/// anchor that shows what ``IceAgent`` adds on top of libnice. It lives here so that GLib stays
/// inside this module; it is not part of the supported API.
@_spi(Benchmarks) public enum BareLibniceBenchmark {
    private final class Ready {
        var readyAt: [ContinuousClock.Instant?] = [nil, nil]
    }

    private struct Context {
        let ready: Ready
        let index: Int
    }

    /// Runs one connect on a dedicated thread (GLib iteration blocks) and returns its duration.
    public static func connectOnce(pacingMS: UInt32) async -> Duration? {
        (try? await SystemThread.run(name: "bench-libnice") { run(pacingMS: pacingMS) }) ?? nil
    }

    private static func run(pacingMS: UInt32) -> Duration? {
        let context = g_main_context_new()
        defer { g_main_context_unref(context) }
        let ready = Ready()
        var agents: [OpaquePointer] = []
        var streams: [UInt32] = []
        var contexts: [UnsafeMutablePointer<Context>] = []
        defer {
            for agent in agents { g_object_unref(UnsafeMutableRawPointer(agent)) }
            for c in contexts { c.deinitialize(count: 1); c.deallocate() }
        }
        let options = NiceAgentOption(rawValue: NICE_AGENT_OPTION_ICE_TRICKLE.rawValue | NICE_AGENT_OPTION_CONSENT_FRESHNESS.rawValue)
        for i in 0..<2 {
            guard let agent = nice_agent_new_full(context, NICE_COMPATIBILITY_RFC5245, options) else { return nil }
            agents.append(agent)
            cnice_set_bool(agent, "controlling-mode", i == 0 ? 1 : 0)
            cnice_set_bool(agent, "upnp", 0)
            cnice_set_bool(agent, "ice-tcp", 0)
            cnice_set_uint(agent, "stun-pacing-timer", pacingMS)
            var address = NiceAddress()
            nice_address_init(&address)
            _ = nice_address_set_from_string(&address, "127.0.0.1")
            _ = nice_agent_add_local_address(agent, &address)
            let stream = nice_agent_add_stream(agent, 1)
            streams.append(stream)
            let c = UnsafeMutablePointer<Context>.allocate(capacity: 1)
            c.initialize(to: Context(ready: ready, index: i))
            contexts.append(c)
            cnice_connect_state_changed(agent, { _, _, _, state, data in
                let c = data!.assumingMemoryBound(to: Context.self).pointee  // the context allocated above
                if state == NICE_COMPONENT_STATE_READY.rawValue && c.ready.readyAt[c.index] == nil {
                    c.ready.readyAt[c.index] = .now
                }
            }, c)
            nice_agent_attach_recv(agent, stream, 1, context, { _, _, _, _, _, _ in }, nil)
            guard nice_agent_gather_candidates(agent, stream) != 0 else { return nil }
        }
        // Host-only gathering completes synchronously; let any pending callbacks run.
        while g_main_context_iteration(context, 0) != 0 {}

        let start = ContinuousClock.now
        for (i, j) in [(0, 1), (1, 0)] {
            var ufrag: UnsafeMutablePointer<gchar>?, pwd: UnsafeMutablePointer<gchar>?
            _ = nice_agent_get_local_credentials(agents[j], streams[j], &ufrag, &pwd)
            _ = nice_agent_set_remote_credentials(agents[i], streams[i], ufrag, pwd)
            g_free(ufrag); g_free(pwd)
            let candidates = nice_agent_get_local_candidates(agents[j], streams[j], 1)
            _ = nice_agent_set_remote_candidates(agents[i], streams[i], 1, candidates)
            cnice_candidate_list_free(candidates)
        }
        let deadline = start + .seconds(10)
        while (ready.readyAt[0] == nil || ready.readyAt[1] == nil) && ContinuousClock.now < deadline {
            g_main_context_iteration(context, 1)
        }
        guard let a = ready.readyAt[0], let b = ready.readyAt[1] else { return nil }
        for (agent, stream) in zip(agents, streams) { nice_agent_attach_recv(agent, stream, 1, context, nil, nil) }
        return max(a, b) - start
    }
}
