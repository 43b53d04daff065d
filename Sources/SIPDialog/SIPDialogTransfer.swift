/// A call's transfers (RFC 3515): the peer's REFER followed here (the node places the call and
/// the stack tells the peer how it goes), and this side's REFER (the peer places it, and its
/// NOTIFYs say how it goes: a success ends this call, a failure leaves it running).
extension SIPDialogState {
    mutating func transfer(_ input: SIPDialogInput) -> [SIPDialogAction] {
        switch input {
        case let .refer(target):
            guard !callEnded, phase == .confirmed else {
                return [.respondToRefer(status: 481, phrase: "Call/Transaction Does Not Exist (the call is not answered, or over)")]
            }
            guard !referIn else { return [.respondToRefer(status: 491, phrase: "Request Pending (a transfer is being followed)")] }
            guard let (uri, replaces) = SIPWire.referTarget(target) else {
                return [.respondToRefer(status: 400, phrase: "Bad Request (the Refer-To is not a SIP address)")]
            }
            referIn = true
            return [.followTransfer(to: uri, replaces: replaces)]
        case let .transferDecided(status, phrase):
            guard referIn else { return [] }
            if status >= 300 { referIn = false }
            return [.respondToRefer(status: status, phrase: phrase)]
        case .transferSettled:
            referIn = false
            return []
        case let .transfer(target, replacing):
            guard !callEnded, phase == .confirmed else { return [.transferRefused("only an answered call can be transferred")] }
            guard referOut == nil else { return [.transferRefused("a transfer of this call is under way already")] }
            referOut = target
            return [.refer(to: target, replacing: replacing)]
        case let .referAnswered(status, phrase):
            guard let target = referOut else { return [] }
            if (200..<300).contains(status) {
                return [.reportTransfer(status: status, detail: "the peer takes the transfer to \(target)")]
            }
            referOut = nil
            return [.reportTransfer(status: status, detail: "the peer refused the transfer to \(target): \(status) \(phrase); the call goes on")]
        case let .notified(body):
            guard let target = referOut, let (status, phrase) = SIPWire.sipfragStatus(body) else { return [] }
            switch status {
            case 100..<200:
                return [.reportTransfer(status: status, detail: "calling \(target): \(status) \(phrase)")]
            case 200..<300:
                referOut = nil
                return [.reportTransfer(status: status, detail: "\(target) answered"), .transferred("transferred to \(target)")]
            default:
                referOut = nil
                return [.reportTransfer(status: status, detail: "the transfer to \(target) failed: \(status) \(phrase); the call goes on")]
            }
        default:
            return []
        }
    }
}
