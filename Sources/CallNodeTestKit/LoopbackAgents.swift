import ICE

/// Two real libnice agents on 127.0.0.1, connected to each other (checks paced at 5 ms), for
/// media over real ICE in tests and benchmarks without a node around it.
public enum LoopbackAgents {
    /// Returns once both agents are connected. The caller closes them.
    public static func connectedPair() async throws -> (controlling: IceAgent, controlled: IceAgent) {
        func configuration(_ role: IceRole) -> IceConfiguration {
            var c = IceConfiguration(role: role)
            c.localAddresses = ["127.0.0.1"]
            c.checkPacing = .milliseconds(5)
            return c
        }
        let a = try await IceAgent(configuration: configuration(.controlling))
        let b = try await IceAgent(configuration: configuration(.controlled))
        try await IceAgent.link(a, b)
        // Sending works only once each side is connected.
        for agent in [a, b] where await agent.state != .connected {
            var events = agent.events.makeAsyncIterator()
            while let event = await events.next(), event != .stateChanged(.connected) {}
        }
        return (a, b)
    }
}
