import CallCore
import Testing

/// The one admission rule every dialect's incoming call goes through, as a value.
@Suite struct AdmissionTests {
    @Test func aCallerNothingStopsMayRing() {
        #expect(Admission.decide(Admission.Facts()) == nil)
        #expect(Admission.decide(Admission.Facts(calls: 2, maximumCalls: 3, knownCaller: true)) == nil)
        // A wire with no identity to check (SIP, a page) is not asked whether it is a contact.
        #expect(Admission.decide(Admission.Facts(knownCaller: nil, acceptUnknownCallers: false)) == nil)
    }

    @Test(arguments: [
        (Admission.Facts(accepting: false), RejectReason.busy),
        (Admission.Facts(draining: true), .draining),
        (Admission.Facts(calls: 3, maximumCalls: 3), .busy),
        (Admission.Facts(blocked: true), .blocked),
        (Admission.Facts(knownCaller: false), .unknownCaller),
    ])
    func eachRuleRefusesWithItsReason(facts: Admission.Facts, reason: RejectReason) {
        #expect(Admission.decide(facts) == reason)
    }

    @Test func unknownCallersRingWhenTheNodeAcceptsThem() {
        #expect(Admission.decide(Admission.Facts(knownCaller: false, acceptUnknownCallers: true)) == nil)
        // …but not when they are blocked.
        #expect(Admission.decide(Admission.Facts(blocked: true, knownCaller: false, acceptUnknownCallers: true)) == .blocked)
    }

    /// The node's own state comes first: a node that takes no calls, then a draining one, then a
    /// full one tells every caller so, blocked or unknown.
    @Test func theNodesOwnStateComesBeforeTheCallers() {
        let everything = Admission.Facts(accepting: false, draining: true, calls: 5, maximumCalls: 1, blocked: true, knownCaller: false)
        #expect(Admission.decide(everything) == .busy)
        var facts = everything
        facts.accepting = true
        #expect(Admission.decide(facts) == .draining)
        facts.draining = false
        #expect(Admission.decide(facts) == .busy)
        facts.maximumCalls = nil
        #expect(Admission.decide(facts) == .blocked)
        facts.blocked = false
        #expect(Admission.decide(facts) == .unknownCaller)
    }

    @Test func theManagersRefusalsAreToldAsTheCallerUnderstandsThem() {
        #expect(Admission.refusal(managerFiltered: .blockList) == .blocked)
        #expect(Admission.refusal(managerFiltered: .doNotDisturb) == .doNotDisturb)
        #expect(Admission.refusal(managerFiltered: .other) == .busy)
    }
}
