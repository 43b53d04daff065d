import Clocks
import Foundation
import Locking
import Logging
import SIP
import SIPDialog

/// SIP as a dialect of the call core: one call's signals as a SIP dialog on the node's
/// ``SIPAgent`` (sofia-sip). What the dialog does is decided by its ``SIPDialogState``; this
/// actor only feeds it the call's signals and the wire's events, in order, and performs what it
/// returns: requests and responses through the agent, signals to the call, timers on the node's
/// clock.
actor SIPDialect: CallDialect {
    nonisolated let traits: DialectTraits
    private let agent: any SIPStack
    /// The call's id at the agent (a new one when the dialog starts again, as after an offer
    /// made again in plain RTP).
    private(set) var sipCall: Int
    private let logger: Logger
    private let clock: TimerClock
    private let closed: @Sendable (Int, Bool) async -> Void
    private var call: DialectCall?
    /// What arrived before the call started (an INVITE's offer).
    private var early: [SIPDialogAction] = []
    private var state: SIPDialogState
    /// When the dialog's armed timers are due, on the node's clock (for a simulation's step).
    private var timersDue: [SIPDialogTimer: Duration] = [:]
    /// Called on the timer's task just before a fired timer reaches the dialog (once; a
    /// simulation holds that moment back, as a timer thread preempted there).
    nonisolated let beforeTimerFires = Locked<(@Sendable () -> Void)?>(nil)
    /// Outgoing, placed for a transfer: the call whose peer asked for it (the stack tells that
    /// peer how this call goes), and the dialog it replaces at the target, if it names one.
    private let referral: (call: Int, replaces: String?)?
    /// Who asked for the last transfer the peer sent (its REFER's Referred-By, else From).
    private var referrer: String?

    var replaceableDialog: ReplaceableDialog? { ReplaceableDialog(id: sipCall) }
    /// Makes the dialect of a call placed for the peer's transfer (to `target`, reporting to
    /// this dialog's peer).
    typealias ReferredDialect = @Sendable (_ target: String, _ referral: (call: Int, replaces: String?)) async -> (any CallDialect)?
    private let referredDialect: ReferredDialect

    /// What the router does with this dialect's id after an event.
    enum Routing: Equatable {
        /// Keep it.
        case keep
        /// The dialog is over: forget it.
        case forget
        /// The call goes on in a new dialog with this id (the old one is over).
        case moved(to: Int)
    }

    init(agent: any SIPStack, call sipCall: Int, outgoing: Bool, uri: String?, traits: DialectTraits, clock: TimerClock, seed: UInt64,
         logger: Logger,
         referral: (call: Int, replaces: String?)? = nil, referredDialect: @escaping ReferredDialect,
         closed: @escaping @Sendable (Int, Bool) async -> Void) {
        self.traits = traits
        self.referral = referral
        self.referredDialect = referredDialect
        self.agent = agent
        self.sipCall = sipCall
        self.logger = logger
        self.clock = clock
        self.closed = closed
        state = SIPDialogState(outgoing: outgoing, uri: uri, mediaEncryption: traits.mediaEncryption, seed: seed)
    }

    // MARK: - The call's side

    func start(_ call: DialectCall) {
        self.call = call
        let waiting = early
        early = []
        for action in waiting { _ = perform(action) }
    }

    func dial() {
        // The dialog starts with the INVITE, which waits for the offer: the wire is "up".
        call?.signalingUp(peer: nil)
    }

    func send(_ signal: CallSignal) {
        _ = handle(.call(signal))
    }

    /// The call this dialect carries (once started).
    var callID: UUID? { call?.id }

    /// Asks the peer to call `target` instead (a REFER): a blind transfer, or with `other` (this
    /// node's call with the target) an attended one, the new call replacing `other` there. Nil
    /// once asked, else why it cannot be. The transfer's progress comes as the call's transfer
    /// events; when it succeeds the call ends.
    func transfer(to target: String, replacing other: (any CallDialect)?) async -> String? {
        var replacing: Int?
        if let other {
            guard let dialog = await other.replaceableDialog else { return "the consulted call is not a SIP call: its dialog cannot be replaced" }
            replacing = dialog.id
        }
        var refusal: String?
        for action in state.handle(.transfer(to: target, replacing: replacing), now: clock.now) {
            if case let .transferRefused(reason) = action { refusal = reason } else { _ = perform(action) }
        }
        return refusal
    }

    func close() async {
        _ = handle(.callClosed)
        await closed(sipCall, state.onWire)
    }

    // MARK: - The wire's side

    /// An event of this call's dialog, from the node's SIP router.
    func received(_ event: SIPEvent) -> Routing {
        let input: SIPDialogInput
        switch event.kind {
        case .invite: input = .invite(sdp: event.sdp)
        case .response: input = .response(status: event.status, phrase: event.phrase, sdp: event.sdp)
        case .cancel: input = .cancel(reason: event.reason)
        case .bye: input = .bye
        case .ack: input = .ack(sdp: event.sdp)
        case .terminated: input = .terminated
        case .info: input = .info(contentType: event.contentType, body: event.body)
        case .update: input = .update(sdp: event.sdp)
        case .sessionExpired: input = .sessionExpired(event.phrase)
        case .optionsResponse: input = .probeAnswered(status: event.status, phrase: event.phrase, local: event.local)
        case .refer:
            referrer = event.fromURI
            input = .refer(target: event.body)
        case .referResponse: input = .referAnswered(status: event.status, phrase: event.phrase)
        case .notify: input = .notified(body: event.body)
        case .byeResponse, .error, .shutdown, .registration: return .keep
        }
        let moved = handle(input)
        if let moved { return .moved(to: moved) }
        return event.kind == .terminated ? .forget : .keep
    }

    /// Feeds the state one input and performs its actions; returns the new dialog's id if one began.
    private func handle(_ input: SIPDialogInput) -> Int? {
        var moved: Int?
        for action in state.handle(input, now: clock.now) {
            if let id = perform(action) { moved = id }
        }
        return moved
    }

    private func perform(_ action: SIPDialogAction) -> Int? {
        switch action {
        case let .invite(uri, displayName, sdp):
            if let referral {
                agent.invite(sipCall, to: uri, displayName: displayName, sdp: sdp, referring: referral.call, replaces: referral.replaces)
            } else {
                agent.invite(sipCall, to: uri, displayName: displayName, sdp: sdp)
            }
        case let .reinvite(sdp):
            agent.invite(sipCall, to: nil, displayName: nil, sdp: sdp)
        case let .respond(status, phrase, sdp, retryAfter):
            agent.respond(sipCall, status: status, phrase: phrase, sdp: sdp, retryAfter: retryAfter)
        case let .respondToUpdate(status, phrase, sdp):
            agent.respondToUpdate(sipCall, status: status, phrase: phrase, sdp: sdp)
        case .probe:
            agent.options(sipCall)
        case .bye:
            agent.bye(sipCall)
        case .cancel:
            agent.cancel(sipCall)
        case let .deliver(signal):
            guard let call else {
                early.append(action)
                return nil
            }
            call.received(signal)
        case let .deliverDTMF(digit):
            call?.receivedDTMF(digit)
        case let .signalingLost(detail):
            call?.signalingLost(detail, resumable: false)
        case .newDialog:
            sipCall = agent.newCall()
            return sipCall
        case let .offerAgainUnencrypted(reason):
            logger.notice("SIP call \(sipCall): the peer refused SRTP (\(reason)); offering plain RTP: its media will NOT be encrypted")
            call?.firstOfferRefusedEncrypted()
        case let .arm(timer, delay):
            let clock = self.clock, hook = beforeTimerFires
            timersDue[timer] = clock.now + delay
            call?.run { [weak self] in
                try? await clock.sleep(for: delay)
                guard !Task.isCancelled else { return }
                hook.withLock { hook in
                    defer { hook = nil }
                    return hook
                }?()
                await self?.fired(timer)
            }
        case let .respondToRefer(status, phrase):
            agent.respondToRefer(sipCall, status: status, phrase: phrase)
        case let .followTransfer(target, replaces):
            guard let call else {
                agent.respondToRefer(sipCall, status: 481, phrase: "Call/Transaction Does Not Exist")
                return nil
            }
            logger.info("SIP call \(sipCall): the peer transfers the call to \(target)")
            let make = referredDialect, referral = (call: sipCall, replaces: replaces)
            call.transferRequested(TransferRequest(
                target: target, referredBy: referrer,
                respond: { [weak self] status, phrase in await self?.decided(status: status, phrase: phrase) },
                dialect: { await make(target, referral) },
                settled: { [weak self] in await self?.settled() }))
        case let .refer(target, replacing):
            logger.info("SIP call \(sipCall): transferring the call to \(target)\(replacing == nil ? "" : " (attended)")")
            if let replacing { agent.refer(sipCall, to: target, replacing: replacing) } else { agent.refer(sipCall, to: target) }
        case .transferRefused:
            break  // said by transfer(to:)
        case let .reportTransfer(status, detail):
            logger.info("SIP call \(sipCall): transfer: \(detail)")
            call?.transferProgress(status: status, detail: detail)
        case let .transferred(detail):
            call?.transferred(detail)
        case let .note(text):
            logger.info("SIP call \(sipCall): \(text)")
        }
        return nil
    }

    private func decided(status: Int, phrase: String?) {
        _ = handle(.transferDecided(status: status, phrase: phrase))
    }

    private func settled() {
        _ = handle(.transferSettled)
    }

    private func fired(_ timer: SIPDialogTimer) {
        timersDue[timer] = nil
        _ = handle(.timerFired(timer))
    }

    /// When `timer` is due, if it is armed (``CallNode/sipTimer(_:of:)``).
    func due(_ timer: SIPDialogTimer) -> Duration? { timersDue[timer] }
}
