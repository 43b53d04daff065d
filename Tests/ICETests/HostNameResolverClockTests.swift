import CallNodeTestKit
import Clocks
import ICE
import Testing

/// The resolver's timeout runs on the clock it is given: a manual one decides when a lookup
/// that has not answered gives up.
@Suite struct HostNameResolverClockTests {
    @Test func aLookupGivesUpWhenItsClockSaysSoNotBefore() async throws {
        let clock = ManualClock()
        // An mDNS name nothing here answers for: getaddrinfo takes its own time to fail, so the
        // timeout (on the manual clock) or the failed lookup ends it — never an address.
        let lookup = Task { await HostNameResolver.resolve("callnode-\(UInt32.random(in: 0...UInt32.max)).invalid", timeout: .seconds(5),
                                                           clock: TimerClock(clock)) }
        await clock.waitForSleepers(1)
        clock.advance(by: .seconds(5))
        #expect(await lookup.value == nil)
    }

    @Test func aNameThatResolvesBeatsItsTimeout() async throws {
        let clock = ManualClock()
        let address = await HostNameResolver.resolve("localhost", timeout: .seconds(5), clock: TimerClock(clock))
        #expect(address == "127.0.0.1" || address == "::1", "\(String(describing: address))")
    }
}
