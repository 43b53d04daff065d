@_spi(Simulation) import CallCore

/// A defect that was fixed, put back on purpose so a simulation sweep can show that it finds it.
/// It rewrites what a leg does after an event (``CallNodeConfiguration/legActionRewrite``):
/// the call's state itself knows no defect.
public enum ReintroducedBug: String, Sendable, CaseIterable {
    /// A resume turns the microphone on again, forgetting the user's mute.
    case resumeUnmutes = "resume-unmutes"
    /// A mute set before the media existed is lost when the media starts.
    case muteLostBeforeMedia = "mute-lost-before-media"

    /// The defect as a node's configuration takes it.
    public var legActionRewrite: @Sendable (LegState, LegState, LegAction) -> LegAction {
        let bug = self
        return { before, after, action in bug.rewrite(before: before, after: after, action) }
    }

    /// The defect as a change to a leg's actions: `action`, done as an event took the call's
    /// state from `before` to `after`, as the defect would have it.
    public func rewrite(before: LegState, after: LegState, _ action: LegAction) -> LegAction {
        switch (self, action) {
        case (.muteLostBeforeMedia, .startMedia):
            // The media starts muted only if the call is held: the user's mute is lost.
            .startMedia(microphoneMuted: after.held)
        case (.resumeUnmutes, .setMicrophone) where before.held && !after.held:
            // The resume turns the microphone on, whatever the user's mute.
            .setMicrophone(muted: false)
        default:
            action
        }
    }
}
