/// What a node asks of a SIP stack: ``SIPAgent`` (sofia-sip) on the wire, or an in-memory stack
/// in simulations (the test kit's `InMemorySIPNetwork`). Calls are named by the stack's ids;
/// what happens comes back as ``events``. The stack does what a SIP user agent's transaction
/// layer does: retransmissions, the ACK, the answers to CANCEL, BYE and in-dialog OPTIONS, the
/// NOTIFYs of a transfer it was asked to follow; every decision about the call is the caller's.
public protocol SIPStack: AnyObject, Sendable {
    /// Everything the stack hears, in order, until it has stopped.
    var events: AsyncStream<SIPEvent> { get }
    /// An id for a new outgoing call.
    func newCall() -> Int
    /// Sends an INVITE: a new call to `uri` from `displayName`, or, for a call that exists
    /// (`uri` nil), a re-INVITE. `sdp` nil: an INVITE without an offer.
    func invite(_ call: Int, to uri: String?, displayName: String?, sdp: String?)
    /// Sends the INVITE of a new call placed because the peer of `referring` asked for it: the
    /// stack reports its progress to that peer by NOTIFY. `replaces`: the dialog it replaces.
    func invite(_ call: Int, to uri: String, displayName: String?, sdp: String?, referring: Int, replaces: String?)
    /// Responds to the call's pending REFER.
    func respondToRefer(_ call: Int, status: Int, phrase: String?)
    /// Asks the call's peer to call `target` (a blind transfer).
    func refer(_ call: Int, to target: String)
    /// Asks the call's peer to call `target` and replace `replacing` (an attended transfer).
    func refer(_ call: Int, to target: String, replacing: Int)
    /// Responds to the call's pending INVITE (with `sdp`; `retryAfter`: a Retry-After header).
    func respond(_ call: Int, status: Int, phrase: String?, sdp: String?, retryAfter: Int?)
    /// Responds to the call's pending UPDATE.
    func respondToUpdate(_ call: Int, status: Int, phrase: String?, sdp: String?)
    /// What out-of-dialog OPTIONS are answered with from now on (`retryAfter` with a 503).
    func setAvailability(status: Int, retryAfter: Int?)
    /// Sends an OPTIONS in the call's dialog.
    func options(_ call: Int)
    /// Ends an established call.
    func bye(_ call: Int)
    /// Cancels an outgoing call that has not been answered.
    func cancel(_ call: Int)
    /// Registers `addressOfRecord` at `registrar` (see ``SIPAgent/register(_:at:user:password:expires:keepAlive:)``).
    func register(_ addressOfRecord: String, at registrar: String, user: String, password: String, expires: Int, keepAlive: Duration?)
    /// Stops the stack: its calls end, ``events`` finishes. Idempotent.
    func stop() async
}

extension SIPAgent: SIPStack {}

/// Where a node's SIP stack comes from: sofia-sip on real sockets when a node has none, an
/// in-memory network in simulations and tests (the test kit's `InMemorySIPNetwork`).
public protocol SIPNetwork: Sendable {
    /// A stack reached at `address` (the node's SIP URI), its calls going out from `from`
    /// (`<sip:user@host:port>`).
    func start(address: String, from: String) async throws(SIPError) -> any SIPStack
}
