import Locking
import SIP
import TestingPrimitives

// What the in-memory SIP network carries and remembers: each stack's side of each dialog, the
// INVITE transactions, the messages on their way, and what a SIP user agent's transaction
// layer does when each arrives (or does not).
extension InMemorySIPNetwork {
    /// One side of a dialog: a stack (by address and generation: a stack started again after a
    /// crash is another) and its id for the call.
    struct Side: Equatable {
        let key: String
        let generation: Int
        let call: Int
    }

    struct Leg {
        let dialog: Int
        let caller: Bool
        /// The peer's INVITE (first or re-INVITE) waiting for this side's final response.
        var serverInvite: Int?
        /// This side's INVITE waiting for its final response.
        var clientInvite: Int?
        /// A 2xx or ACK was sent or received: the dialog is up.
        var confirmed = false
        /// This side answered the first INVITE with a 2xx and waits for the ACK until this tick.
        var ackDue: Int?
        var byeSent = false
        var terminated = false
        /// The peer's REFER waiting for this side's answer.
        var referIn: Int?
        /// The call (on this stack) whose peer asked for this call by REFER: told how it goes.
        var referring: Int?
    }

    struct Endpoint {
        let generation: Int
        let uri: String
        let continuation: AsyncStream<SIPEvent>.Continuation
        var nextCall = 1
        var legs: [Int: Leg] = [:]
        var stopped = false
        var crashed = false
    }

    struct Dialog {
        let caller: Side
        var callee: Side?
        /// The phone the caller called (the user part of its address), whose part the network plays.
        var phone: Phone?
    }

    struct Transaction {
        let client: Side
        let dialog: Int
        let sent: Int
        var finals = 0
        /// A provisional response came: the INVITE no longer times out by itself (Timer B).
        var proceeding = false
        /// When this side cancelled it: without a final response 32 s later it is over (RFC 3261 §9.1).
        var cancelled: Int?
    }

    enum Payload {
        case invite(sdp: String?, displayName: String?, replaces: Int?, first: Bool, transaction: Int)
        case ack
        case cancel(transaction: Int)
        case bye(transaction: Int)
        case options(transaction: Int)
        case refer(target: String, transaction: Int)
        case notify(String)
        case response(to: Request, transaction: Int, status: Int, phrase: String, sdp: String?)
        /// What a peer's stack or user sends that a node never does (``InMemorySIPNetwork/PeerRequest``);
        /// the receiver's answer goes to that stack, which the dialog on the other side never sees.
        case info(body: String)
        case update(sdp: String?)
    }

    enum Request: Equatable {
        case invite, bye, options, refer, notify, cancel
    }

    struct Message {
        var due: Int
        let order: Int
        let sent: Int
        let from: Side
        /// The receiver: a side, or (a first INVITE) an address.
        let to: Side?
        let toKey: String
        let dialog: Int
        let payload: Payload
    }

    struct State {
        static let replacesPrefix = "memory-dialog-"

        var random: SplitMix64
        var conditions: Conditions
        var tick = 0
        var order = 0
        var generation = 0
        var endpoints: [String: Endpoint] = [:]
        var dialogs: [Int: Dialog] = [:]
        var transactions: [Int: Transaction] = [:]
        var queue: [Message] = []
        var lastDue: [String: Int] = [:]
        var unreachable: Set<String> = []
        var problems: [String] = []
        var updateAnswers: [InMemorySIPNetwork.UpdateAnswer] = []
        var crossings = 0
        /// Client transactions other than INVITE waiting for an answer: (client, request, dialog, sent).
        var waiting: [Int: (client: Side, request: Request, sent: Int)] = [:]
        var nextTransaction = 1
        /// Dialogs a peer's BYE or CANCEL ended, whose end the stack reports at the next tick:
        /// sofia-sip tells the request, then the dialog's end, as two events its node takes one
        /// at a time (a leg's turn can come between them).
        var endings: [(due: Int, side: Side)] = []
        /// What the stacks have to report and when (``Conditions/reportLag``), in order.
        var reports: [(due: Int, yield: Yield)] = []

        init(random: SplitMix64, conditions: Conditions) {
            self.random = random
            self.conditions = conditions
        }

        mutating func next() -> UInt64 { random.next() }

        /// The reports due now: `out` at once, or after ``Conditions/reportLag`` behind those
        /// still waiting.
        mutating func report(_ out: [Yield]) -> [Yield] {
            guard conditions.reportLag > 0 || !reports.isEmpty else { return out }
            reports += out.map { (tick + conditions.reportLag, $0) }
            let due = reports.prefix { $0.due <= tick }
            reports.removeFirst(due.count)
            return due.map(\.yield)
        }

        func leg(_ key: String, _ call: Int) -> Leg? { endpoints[key]?.legs[call] }

        func side(_ key: String, _ call: Int) -> Side { Side(key: key, generation: endpoints[key]?.generation ?? 0, call: call) }

        /// The leg of `side`, if its stack is still the one that had it.
        func leg(of side: Side) -> Leg? {
            guard let endpoint = endpoints[side.key], endpoint.generation == side.generation else { return nil }
            return endpoint.legs[side.call]
        }

        mutating func update(_ side: Side, _ change: (inout Leg) -> Void) {
            guard endpoints[side.key]?.generation == side.generation, endpoints[side.key]?.legs[side.call] != nil else { return }
            change(&endpoints[side.key]!.legs[side.call]!)
        }

        mutating func newCall(_ key: String) -> Int {
            let id = endpoints[key]!.nextCall
            endpoints[key]!.nextCall += 1
            return id
        }

        mutating func emit(_ key: String, _ call: Int, _ event: SIPEvent, into out: inout [Yield]) {
            guard let endpoint = endpoints[key], !endpoint.crashed, !endpoint.stopped else { return }
            guard let leg = endpoint.legs[call], !leg.terminated else { return }
            var event = event
            event.call = call
            out.append(.init(key: key, continuation: endpoint.continuation, event: event))
            if event.kind == .terminated { endpoints[key]!.legs[call]!.terminated = true }
        }

        mutating func emit(_ side: Side, _ event: SIPEvent, into out: inout [Yield]) {
            guard endpoints[side.key]?.generation == side.generation else { return }
            emit(side.key, side.call, event, into: &out)
        }

        mutating func terminate(_ side: Side, into out: inout [Yield]) {
            emit(side, SIPEvent(kind: .terminated, status: 200, phrase: "terminated"), into: &out)
        }

        // MARK: Sending

        mutating func send(from: Side, to: Side?, toKey: String, dialog: Int, _ payload: Payload) {
            let spread = conditions.delay.upperBound - conditions.delay.lowerBound + 1
            var due = tick + conditions.delay.lowerBound + Int(next() % UInt64(max(1, spread))) + 1
            let direction = from.key + ">" + toKey
            due = max(due, lastDue[direction] ?? 0)
            lastDue[direction] = due
            order += 1
            queue.append(Message(due: due, order: order, sent: tick, from: from, to: to, toKey: toKey, dialog: dialog, payload: payload))
        }

        /// The peer's side of `leg`'s dialog.
        func peer(_ leg: Leg) -> Side? {
            guard let dialog = dialogs[leg.dialog] else { return nil }
            return leg.caller ? dialog.callee : dialog.caller
        }

        mutating func invite(_ key: String, _ call: Int, to uri: String?, displayName: String?, sdp: String?, referring: Int?,
                             replaces: String?, into out: inout [Yield]) {
            let me = side(key, call)
            if var leg = leg(key, call) {
                // A re-INVITE.
                guard !leg.terminated, !leg.byeSent, let peer = peer(leg) else { return }
                if leg.clientInvite != nil {
                    problems.append("\(key) sent an INVITE in dialog \(leg.dialog) while its last one was unanswered")
                }
                let id = newTransaction(me, dialog: leg.dialog)
                leg.clientInvite = id
                endpoints[key]!.legs[call] = leg
                if leg.serverInvite != nil { crossings += 1 }
                send(from: me, to: peer, toKey: peer.key, dialog: leg.dialog,
                     .invite(sdp: sdp, displayName: nil, replaces: nil, first: false, transaction: id))
                return
            }
            guard let uri else { return }
            let dialog = dialogs.count + 1
            dialogs[dialog] = Dialog(caller: me, phone: Phone(calling: uri))
            var leg = Leg(dialog: dialog, caller: true)
            leg.referring = referring
            let id = newTransaction(me, dialog: dialog)
            leg.clientInvite = id
            endpoints[key]!.legs[call] = leg
            let replaced = replaces.flatMap { $0.hasPrefix(Self.replacesPrefix) ? Int($0.dropFirst(Self.replacesPrefix.count)) : -1 }
            send(from: me, to: nil, toKey: InMemorySIPNetwork.hostPort(uri), dialog: dialog,
                 .invite(sdp: sdp, displayName: displayName, replaces: replaced, first: true, transaction: id))
        }

        mutating func newTransaction(_ client: Side, dialog: Int) -> Int {
            let id = nextTransaction
            nextTransaction += 1
            transactions[id] = Transaction(client: client, dialog: dialog, sent: tick)
            return id
        }

        mutating func respond(_ key: String, _ call: Int, status: Int, phrase: String?, sdp: String?, into out: inout [Yield]) {
            guard var leg = leg(key, call), !leg.terminated, let id = leg.serverInvite, let peer = peer(leg) else { return }
            let me = side(key, call)
            let first = !leg.confirmed && !leg.caller
            if status >= 200 {
                leg.serverInvite = nil
                if (200..<300).contains(status) {
                    leg.confirmed = true
                    if first { leg.ackDue = tick + conditions.timeout }
                }
            }
            endpoints[key]!.legs[call] = leg
            // A phone that answers at once sends no ringing.
            if first, status == 180, sdp == nil, dialogs[leg.dialog]?.phone == .answersAtOnce { return }
            let response = Payload.response(to: .invite, transaction: id, status: status, phrase: phrase ?? Self.phrase(status), sdp: sdp)
            send(from: me, to: peer, toKey: peer.key, dialog: leg.dialog, response)
            if status > 100, status < 200, conditions.repeatedProvisionals > 0,
               Double(next() >> 11) / Double(1 << 53) < conditions.repeatedProvisionals {
                send(from: me, to: peer, toKey: peer.key, dialog: leg.dialog, response)
            }
            // A refused first INVITE: this side's dialog is over once the refusal is out.
            if first, status >= 300 { terminate(me, into: &out) }
        }

        /// Sends a request other than INVITE in `call`'s dialog; its answer (or a local 408) comes back.
        mutating func request(_ key: String, _ call: Int, _ make: (Int) -> Payload, _ request: Request) {
            guard let leg = leg(key, call), !leg.terminated, let peer = peer(leg) else { return }
            let me = side(key, call)
            let id = nextTransaction
            nextTransaction += 1
            waiting[id] = (me, request, tick)
            send(from: me, to: peer, toKey: peer.key, dialog: leg.dialog, make(id))
        }

        mutating func sendBye(_ key: String, _ call: Int) {
            guard var leg = leg(key, call), !leg.terminated, !leg.byeSent else { return }
            if !leg.confirmed {
                // Before the dialog is up, the stack cancels (the caller) instead.
                if leg.caller { cancel(key, call) }
                return
            }
            leg.byeSent = true
            endpoints[key]!.legs[call] = leg
            request(key, call, { .bye(transaction: $0) }, .bye)
        }

        mutating func cancel(_ key: String, _ call: Int) {
            guard let leg = leg(key, call), leg.caller, !leg.confirmed, !leg.terminated, let id = leg.clientInvite else { return }
            let me = side(key, call)
            let dialog = dialogs[leg.dialog]!
            if transactions[id]?.cancelled == nil { transactions[id]?.cancelled = tick }
            send(from: me, to: dialog.callee, toKey: dialog.callee?.key ?? pendingKey(leg.dialog), dialog: leg.dialog, .cancel(transaction: id))
        }

        /// Where the first INVITE of `dialog` went (its callee not known yet).
        func pendingKey(_ dialog: Int) -> String {
            queue.first { $0.dialog == dialog && $0.to == nil }?.toKey ?? ""
        }

        mutating func refer(_ key: String, _ call: Int, to target: String) {
            guard let leg = leg(key, call), !leg.terminated, leg.confirmed else { return }
            request(key, call, { .refer(target: target, transaction: $0) }, .refer)
        }

        mutating func respondToRefer(_ key: String, _ call: Int, status: Int, phrase: String?) {
            guard var leg = leg(key, call), !leg.terminated, let id = leg.referIn, let peer = peer(leg) else { return }
            leg.referIn = nil
            endpoints[key]!.legs[call] = leg
            send(from: side(key, call), to: peer, toKey: peer.key, dialog: leg.dialog,
                 .response(to: .refer, transaction: id, status: status, phrase: phrase ?? Self.phrase(status), sdp: nil))
            // The transfer is followed: its subscription's first NOTIFY (RFC 3515 §2.4.5).
            if status == 202 { send(from: side(key, call), to: peer, toKey: peer.key, dialog: leg.dialog, .notify("SIP/2.0 100 Trying")) }
        }

        /// Tells the peer of `call` (which asked for a transfer) how the new call goes.
        mutating func notify(_ key: String, _ call: Int, status: Int, phrase: String) {
            guard let leg = leg(key, call), !leg.terminated, let peer = peer(leg) else { return }
            send(from: side(key, call), to: peer, toKey: peer.key, dialog: leg.dialog, .notify("SIP/2.0 \(status) \(phrase)"))
        }

        static func phrase(_ status: Int) -> String {
            switch status {
            case 100: "Trying"
            case 180: "Ringing"
            case 183: "Session Progress"
            case 200: "OK"
            case 202: "Accepted"
            case 408: "Request Timeout"
            case 481: "Call/Transaction Does Not Exist"
            case 486: "Busy Here"
            case 487: "Request Terminated"
            case 491: "Request Pending"
            case 500: "Server Internal Error"
            case 503: "Service Unavailable"
            default: "Status \(status)"
            }
        }

        // MARK: Arriving

        /// A request that cannot be delivered is answered where it came from: `local` by the
        /// sender's own stack (the port is closed), else by the receiver's (it has no such dialog).
        mutating func answerUndelivered(_ message: Message, status: Int, local: Bool, into out: inout [Yield]) {
            let phrase = Self.phrase(status)
            switch message.payload {
            case let .bye(transaction), let .options(transaction), let .refer(_, transaction):
                waiting[transaction] = nil
            default: break
            }
            switch message.payload {
            case .invite:
                finishInvite(of: message.from)
                var event = SIPEvent(kind: .response, status: status, phrase: phrase)
                event.local = local
                emit(message.from, event, into: &out)
                terminate(message.from, into: &out)
            case .bye:
                emit(message.from, SIPEvent(kind: .byeResponse, status: status, phrase: phrase), into: &out)
                terminate(message.from, into: &out)
            case .options:
                var event = SIPEvent(kind: .optionsResponse, status: status, phrase: phrase)
                event.local = local
                emit(message.from, event, into: &out)
            case .refer:
                emit(message.from, SIPEvent(kind: .referResponse, status: status, phrase: phrase), into: &out)
            case let .cancel(transaction):
                // The CANCEL meets a closed port, or a stack that no longer knows the dialog: its
                // INVITE is over at once (where sofia-sip would wait 32 s for its final response).
                guard let leg = leg(of: message.from), leg.clientInvite == transaction else { return }
                finishInvite(of: message.from)
                var event = SIPEvent(kind: .response, status: status, phrase: phrase)
                event.local = true
                emit(message.from, event, into: &out)
                if !leg.confirmed { terminate(message.from, into: &out) }
            case .ack, .notify, .response, .info, .update:
                break
            }
        }

        /// The client's INVITE transaction got its final response.
        mutating func finishInvite(of client: Side) {
            guard let id = leg(of: client)?.clientInvite else { return }
            transactions[id]?.finals += 1
            update(client) { $0.clientInvite = nil }
        }

        mutating func deliver(_ message: Message, into out: inout [Yield]) {
            let receiver = endpoints[message.toKey]
            let request: Bool = if case .response = message.payload { false } else { true }
            guard let receiver, !receiver.crashed, !receiver.stopped else {
                if request { answerUndelivered(message, status: 503, local: true, into: &out) }
                return
            }
            // A first INVITE makes the callee's side of the dialog.
            if case let .invite(sdp, displayName, replaces, true, transaction) = message.payload {
                if dialogs[message.dialog]?.phone == .answersAnotherCodec {
                    // Its INVITE stays open: the caller's CANCEL finds no stack that knows it, and
                    // ends it at once (as one that meets a closed port).
                    let me = Side(key: message.toKey, generation: receiver.generation, call: 0)
                    for (status, sdp) in [(180, nil), (183, Phone.anotherCodecAnswer)] {
                        send(from: me, to: message.from, toKey: message.from.key, dialog: message.dialog,
                             .response(to: .invite, transaction: transaction, status: status, phrase: Self.phrase(status), sdp: sdp))
                    }
                    return
                }
                if let phone = dialogs[message.dialog]?.phone, phone.refusesSRTP, sdp.map(Phone.offersSRTP) == true {
                    // A phone without SRTP refuses an encrypted offer itself (ringing first, or not).
                    let me = Side(key: message.toKey, generation: receiver.generation, call: 0)
                    for status in phone == .refusesSRTPAfterRinging ? [180, 488] : [488] {
                        send(from: me, to: message.from, toKey: message.from.key, dialog: message.dialog,
                             .response(to: .invite, transaction: transaction, status: status,
                                       phrase: status == 488 ? "Not Acceptable Here" : Self.phrase(status), sdp: nil))
                    }
                    return
                }
                var replacedCall: Int?
                if let replaces {
                    replacedCall = receiver.legs.first { $0.value.dialog == replaces && !$0.value.terminated }?.key
                    if replacedCall == nil { return answerUndelivered(message, status: 481, local: false, into: &out) }
                }
                let call = newCall(message.toKey)
                let me = side(message.toKey, call)
                dialogs[message.dialog]?.callee = me
                var made = Leg(dialog: message.dialog, caller: false)
                made.serverInvite = transaction
                endpoints[message.toKey]!.legs[call] = made
                var event = SIPEvent(kind: .invite, status: 0, phrase: "INVITE", fromURI: endpoints[message.from.key]?.uri,
                                     fromDisplay: displayName, contentType: sdp == nil ? nil : "application/sdp", body: sdp)
                event.replaces = replacedCall
                emit(me, event, into: &out)
                return
            }
            // Everything else belongs to a dialog the receiver must still have.
            let target = message.to ?? dialogs[message.dialog]?.callee
            guard let target, let leg = leg(of: target), !leg.terminated else {
                if request { answerUndelivered(message, status: 481, local: false, into: &out) }
                return
            }
            switch message.payload {
            case let .invite(sdp, _, _, _, transaction):
                if leg.serverInvite != nil {
                    // A second re-INVITE while the first waits (RFC 3261 §14.2).
                    send(from: target, to: message.from, toKey: message.from.key, dialog: message.dialog,
                         .response(to: .invite, transaction: transaction, status: 500, phrase: "Server Internal Error", sdp: nil))
                    return
                }
                if leg.clientInvite != nil { crossings += 1 }
                update(target) { $0.serverInvite = transaction }
                if conditions.trying {
                    // sofia-sip answers every INVITE it takes with 100 Trying, re-INVITEs too.
                    send(from: target, to: message.from, toKey: message.from.key, dialog: message.dialog,
                         .response(to: .invite, transaction: transaction, status: 100, phrase: "Trying", sdp: nil))
                }
                emit(target, SIPEvent(kind: .invite, status: 0, phrase: "INVITE", contentType: sdp == nil ? nil : "application/sdp", body: sdp), into: &out)
            case .ack:
                update(target) { $0.ackDue = nil }
                emit(target, SIPEvent(kind: .ack, status: 0, phrase: "ACK"), into: &out)
            case let .cancel(transaction):
                // Only an INVITE still unanswered is cancelled; the stack answers it 487.
                guard leg.serverInvite == transaction, !leg.confirmed else { return }
                emit(target, SIPEvent(kind: .cancel, status: 0, phrase: "CANCEL"), into: &out)
                update(target) { $0.serverInvite = nil }
                send(from: target, to: message.from, toKey: message.from.key, dialog: message.dialog,
                     .response(to: .invite, transaction: transaction, status: 487, phrase: "Request Terminated", sdp: nil))
                endings.append((tick + 1, target))
            case let .bye(transaction):
                emit(target, SIPEvent(kind: .bye, status: 0, phrase: "BYE"), into: &out)
                send(from: target, to: message.from, toKey: message.from.key, dialog: message.dialog,
                     .response(to: .bye, transaction: transaction, status: 200, phrase: "OK", sdp: nil))
                endings.append((tick + 1, target))
            case let .options(transaction):
                let status = conditions.optionsAnswer
                send(from: target, to: message.from, toKey: message.from.key, dialog: message.dialog,
                     .response(to: .options, transaction: transaction, status: status, phrase: Self.phrase(status), sdp: nil))
            case let .info(body):
                emit(target, SIPEvent(kind: .info, status: 0, phrase: "INFO", contentType: "application/dtmf-relay", body: body), into: &out)
            case let .update(sdp):
                emit(target, SIPEvent(kind: .update, status: 0, phrase: "UPDATE", contentType: sdp.map { _ in "application/sdp" }, body: sdp), into: &out)
            case let .refer(referTo, transaction):
                if leg.referIn != nil {
                    send(from: target, to: message.from, toKey: message.from.key, dialog: message.dialog,
                         .response(to: .refer, transaction: transaction, status: 491, phrase: "Request Pending", sdp: nil))
                    return
                }
                update(target) { $0.referIn = transaction }
                var event = SIPEvent(kind: .refer, status: 0, phrase: "REFER", fromURI: endpoints[message.from.key]?.uri, body: referTo)
                event.contentType = nil
                emit(target, event, into: &out)
            case let .notify(fragment):
                emit(target, SIPEvent(kind: .notify, status: 0, phrase: "NOTIFY", contentType: "message/sipfrag", body: fragment), into: &out)
            case let .response(request, transaction, status, phrase, sdp):
                respondArrived(at: target, leg: leg, request, transaction: transaction, status: status, phrase: phrase, sdp: sdp,
                               from: message.from, dialog: message.dialog, into: &out)
            }
        }

        mutating func respondArrived(at target: Side, leg: Leg, _ request: Request, transaction: Int, status: Int, phrase: String, sdp: String?,
                                     from: Side, dialog: Int, into out: inout [Yield]) {
            switch request {
            case .invite:
                // A response to a transaction this side has given up (its local 408 came first).
                guard leg.clientInvite == transaction else { return }
                let first = !leg.confirmed && leg.caller
                var event = SIPEvent(kind: .response, status: status, phrase: phrase, contentType: sdp == nil ? nil : "application/sdp", body: sdp)
                event.local = false
                if status < 200 { transactions[transaction]?.proceeding = true }
                if status >= 200 {
                    finishInvite(of: target)
                    if (200..<300).contains(status) {
                        update(target) { $0.confirmed = true }
                        send(from: target, to: from, toKey: from.key, dialog: dialog, .ack)
                    }
                }
                emit(target, event, into: &out)
                if let referring = leg.referring, status >= 180 {
                    notify(target.key, referring, status: status, phrase: phrase)
                    if status >= 200 { update(target) { $0.referring = nil } }
                }
                if first, status >= 300 { terminate(target, into: &out) }
            case .bye, .options, .refer:
                // Answered in time, or already answered by this side's own stack (408).
                guard waiting.removeValue(forKey: transaction) != nil else { return }
                switch request {
                case .bye:
                    emit(target, SIPEvent(kind: .byeResponse, status: status, phrase: phrase), into: &out)
                    terminate(target, into: &out)
                case .options: emit(target, SIPEvent(kind: .optionsResponse, status: status, phrase: phrase), into: &out)
                default: emit(target, SIPEvent(kind: .referResponse, status: status, phrase: phrase), into: &out)
                }
            case .notify, .cancel:
                break
            }
            _ = dialog
        }

        // MARK: Timers

        /// Transactions past their time: the client's stack answers them 408 itself; a 2xx never
        /// ACKed ends its session (the callee's stack sends BYE).
        mutating func expire(into out: inout [Yield]) {
            for (id, transaction) in transactions.sorted(by: { $0.key < $1.key }) where transaction.finals == 0 {
                let timedOut = !transaction.proceeding && tick - transaction.sent >= conditions.timeout
                let cancelGivenUp = transaction.cancelled.map { tick - $0 >= conditions.timeout } ?? false
                guard timedOut || cancelGivenUp, let leg = leg(of: transaction.client), leg.clientInvite == id else { continue }
                let first = !leg.confirmed
                finishInvite(of: transaction.client)
                var event = SIPEvent(kind: .response, status: 408, phrase: "Request Timeout")
                event.local = true
                emit(transaction.client, event, into: &out)
                if first { terminate(transaction.client, into: &out) }
            }
            for (id, wait) in waiting.sorted(by: { $0.key < $1.key }) where tick - wait.sent >= conditions.timeout {
                waiting[id] = nil
                guard let leg = leg(of: wait.client), !leg.terminated else { continue }
                var event: SIPEvent
                switch wait.request {
                case .bye:
                    emit(wait.client, SIPEvent(kind: .byeResponse, status: 408, phrase: "Request Timeout"), into: &out)
                    terminate(wait.client, into: &out)
                    continue
                case .options: event = SIPEvent(kind: .optionsResponse, status: 408, phrase: "Request Timeout")
                case .refer: event = SIPEvent(kind: .referResponse, status: 408, phrase: "Request Timeout")
                default: continue
                }
                event.local = true
                emit(wait.client, event, into: &out)
            }
            for (key, endpoint) in endpoints.sorted(by: { $0.key < $1.key }) where !endpoint.crashed && !endpoint.stopped {
                for (call, leg) in endpoint.legs.sorted(by: { $0.key < $1.key }) where !leg.terminated {
                    guard let due = leg.ackDue, tick >= due, !leg.byeSent else { continue }
                    endpoints[key]!.legs[call]!.ackDue = nil
                    emit(key, call, SIPEvent(kind: .sessionExpired, status: 408, phrase: "the 200 was never acknowledged"), into: &out)
                    sendBye(key, call)
                }
            }
        }
    }
}
