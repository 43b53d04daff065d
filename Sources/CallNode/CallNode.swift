/// CallNode: a peer-to-peer audio call node.
///
/// This umbrella module re-exports the node's parts so embedders write one import:
/// - `ICE`: ``IceAgent`` over libnice — gathering, trickle, TURN/STUN, restart, datagrams.
@_exported import ICE

/// The version of the CallNode library.
public enum CallNodeVersion {
    /// Semantic version string.
    public static let string = "0.1.0"
}
