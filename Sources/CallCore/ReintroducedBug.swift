/// A defect that was fixed, put back on purpose so a simulation sweep can show that it finds it.
///
/// Only a simulation sets one (``LegState/reintroducedBug``); a node never does on its own.
@_spi(Simulation)
public enum ReintroducedBug: String, Sendable, CaseIterable {
    /// A resume turns the microphone on again, forgetting the user's mute.
    case resumeUnmutes = "resume-unmutes"
    /// A mute set before the media existed is lost when the media starts.
    case muteLostBeforeMedia = "mute-lost-before-media"
}
