import SDP

/// The peer's offer and answer the leg tests hand the state: what they say does not matter
/// to its decisions, only that the state hands back, in its action, the one it was given.
let anOffer = SessionDescription(origin: SDPOrigin(sessionID: "1"), media: [])
let anAnswer = SessionDescription(origin: SDPOrigin(sessionID: "2"), media: [])
