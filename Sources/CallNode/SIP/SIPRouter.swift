import Clocks
import Foundation
import Logging
import SIP
import SIPDialog
import Signaling

/// The node's SIP calls: its agent, and the dialect of each call by the agent's id for it.
/// Incoming INVITEs go through the node's admission as any call does; everything else of a
/// dialog goes to its call's dialect.
actor SIPRouter {
    let agent: any SIPStack
    let settings: SIPListenSettings
    private var dialects: [Int: SIPDialect] = [:]
    private let logger: Logger
    private weak var node: CallNode?
    /// The registration's state, and the retry waiting after a failure (with its delay).
    private(set) var registration: SIPRegistrationState?
    private var retry: Task<Void, Never>?
    private var retryDelay: Duration = .zero
    /// Stopped (``stop()``): a registration failing from now on is not tried again.
    private var stopped = false

    /// The node's timer clock (a manual one in tests): the retry after a failure waits on it.
    private let clock: TimerClock
    /// The node's seed for its dialogs' random choices (nil: the system's generator).
    private let seed: UInt64?

    init(agent: any SIPStack, settings: SIPListenSettings, node: CallNode, clock: TimerClock, seed: UInt64? = nil, logger: Logger) {
        self.agent = agent
        self.seed = seed
        self.clock = clock
        self.settings = settings
        self.node = node
        self.logger = logger
    }

    /// Reads the agent's events until it stops.
    func run() async {
        for await event in agent.events {
            await route(event)
        }
    }

    /// Registers at the settings' registrar (if any).
    func register() {
        guard let account = settings.registration, let registrar = account.registrarURI, let parts = account.parts else { return }
        logger.info("registering \(account)")
        agent.register(account.addressOfRecord, at: registrar, user: account.user ?? parts.user, password: account.password,
                       expires: Int(account.expires.components.seconds), keepAlive: account.keepAliveInterval)
    }

    private func registrationChanged(_ event: SIPEvent) async {
        guard let account = settings.registration else { return }
        let aor = account.addressOfRecord
        let state: SIPRegistrationState
        if (200..<300).contains(event.status) {
            retryDelay = .zero
            state = event.expires > 0 ? .registered(addressOfRecord: aor, expires: .seconds(event.expires)) : .unregistered(addressOfRecord: aor)
        } else {
            // Tried again later, waiting longer while it keeps failing (up to ten times the first wait).
            retryDelay = retryDelay == .zero ? account.retryAfter : min(retryDelay * 2, account.retryAfter * 10)
            state = .failed(addressOfRecord: aor, status: event.status, reason: event.phrase, retryIn: retryDelay)
            let delay = retryDelay, clock = self.clock
            retry?.cancel()
            retry = stopped ? nil : Task { [weak self] in
                try? await clock.sleep(for: delay)
                guard !Task.isCancelled else { return }
                await self?.register()
            }
        }
        guard state != registration else { return }
        registration = state
        switch state {
        case .failed: logger.notice("SIP: \(state)")
        default: logger.info("SIP: \(state)")
        }
        node?.broadcaster.send(.sipRegistration(state))
    }

    private func route(_ event: SIPEvent) async {
        if event.kind == .registration {
            await registrationChanged(event)
            return
        }
        if let dialect = dialects[event.call] {
            switch await dialect.received(event) {
            case .keep: break
            case .forget: dialects[event.call] = nil
            case let .moved(to: id):
                dialects[event.call] = nil
                dialects[id] = dialect
            }
            return
        }
        if event.kind == .update {
            // An UPDATE for a call this node has let go of.
            agent.respondToUpdate(event.call, status: 481, phrase: "Call/Transaction Does Not Exist", sdp: nil)
            return
        }
        guard event.kind == .invite else { return }
        await invited(event)
    }

    /// A new INVITE: a call admitted (or refused) by the node, its offer waiting in its dialect.
    private func invited(_ event: SIPEvent) async {
        guard let node else { return }
        let from = event.fromURI ?? "sip:unknown"
        let dialect = makeDialect(call: event.call, outgoing: false, uri: nil)
        // The first INVITE, with its offer or without (the callee's offer then goes in its 200).
        _ = await dialect.received(event)
        logger.info("SIP INVITE from \(from)\(event.sdp == nil ? " (no offer)" : "")")
        let name = event.fromDisplay.flatMap { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\" ")).nilIfEmpty }
        let invitation = CallInvitation(displayName: name, title: nil)
        if let replaced = event.replaces {
            // An attended transfer's INVITE: it takes the place of the call it names, unrung.
            guard let old = await dialects[replaced]?.callID else {
                agent.respond(event.call, status: 481, phrase: "Call/Transaction Does Not Exist (the Replaces names no call here)", sdp: nil, retryAfter: nil)
                dialects[event.call] = nil
                return
            }
            if await node.replace(old, with: dialect, handle: from, invitation: invitation) == nil { dialects[event.call] = nil }
            return
        }
        let admitted = await node.admit(dialect, handle: from, invitation: invitation)
        if admitted == nil { dialects[event.call] = nil }
    }

    /// A dialect for a new outgoing call to `uri`; `referral`: placed for the transfer the peer
    /// of that call asked for (the stack tells it how this call goes), replacing a dialog at
    /// the target if the transfer named one.
    func outgoing(to uri: String, referral: (call: Int, replaces: String?)? = nil) -> SIPDialect {
        makeDialect(call: agent.newCall(), outgoing: true, uri: uri, referral: referral)
    }

    private func makeDialect(call: Int, outgoing: Bool, uri: String?, referral: (call: Int, replaces: String?)? = nil) -> SIPDialect {
        let traits = DialectTraits(peer: .other, resumable: false, firstOffer: .byCaller, offersICE: settings.offersICE,
                                   mediaAddress: settings.mediaAddress, mediaEncryption: settings.mediaEncryption,
                                   codecs: settings.codecs, refusesLaterOffers: true)
        // Each dialog's own random choices: from the node's seed and the dialog's id when set.
        let seed = self.seed.map { $0 ^ (UInt64(truncatingIfNeeded: call) &* 0x9E37_79B9_7F4A_7C15) } ?? UInt64.random(in: .min ... .max)
        let dialect = SIPDialect(agent: agent, call: call, outgoing: outgoing, uri: uri, traits: traits, clock: clock, seed: seed, logger: logger,
                                 referral: referral, referredDialect: { [weak self] target, referral in
                                     await self?.outgoing(to: target, referral: referral)
                                 }) { [weak self] call, onWire in
            // A dialog on the wire is forgotten when it has ended there (its BYE answered, a
            // late CANCEL); an INVITE that never went out, now.
            guard !onWire else { return }
            await self?.forget(call)
        }
        dialects[call] = dialect
        return dialect
    }

    /// The stack's id for `call`'s dialog.
    func dialog(of call: UUID) async -> Int? {
        for (id, dialect) in dialects.sorted(by: { $0.key < $1.key }) where await dialect.callID == call { return id }
        return nil
    }

    /// The dialect carrying `call`.
    func dialect(of call: UUID) async -> SIPDialect? {
        guard let id = await dialog(of: call) else { return nil }
        return dialects[id]
    }

    /// The call carried by the dialog the stack knows as `id`.
    func call(of id: Int) async -> UUID? {
        await dialects[id]?.callID
    }

    private func forget(_ call: Int) {
        dialects[call] = nil
    }

    func stop() async {
        stopped = true
        retry?.cancel()
        retry = nil
        // The stack un-registers as it stops; a failure of that comes in meanwhile and arms no retry.
        await agent.stop()
    }

    /// What OPTIONS probes are answered with (told only when it changes): 200 while the node
    /// takes calls, 503 with Retry-After while it is full (a few seconds) or draining (longer).
    private var lastAvailability: (takingCalls: Bool, draining: Bool) = (true, false)

    func setAvailability(takingCalls: Bool, draining: Bool) {
        guard lastAvailability != (takingCalls, draining) else { return }
        lastAvailability = (takingCalls, draining)
        if takingCalls {
            agent.setAvailability(status: 200, retryAfter: nil)
        } else {
            agent.setAvailability(status: 503, retryAfter: draining ? SIPWire.drainingRetryAfter : SIPWire.fullRetryAfter)
        }
    }
}

extension String {
    fileprivate var nilIfEmpty: String? { isEmpty ? nil : self }
}
