import Locking

/// A session that can be interrupted when another one takes its devices.
protocol InterruptibleSession: AnyObject, Sendable {
    nonisolated var name: String { get }
    func interrupt(by other: String) async
    func endInterruption() async
}

/// Which in-process session holds which device, so that activating one session interrupts
/// the others on the same devices (unless it mixes), and their interruption ends when it lets go.
final class DeviceArbiter: Sendable {
    static let shared = DeviceArbiter()

    private struct Holder {
        let session: any InterruptibleSession
        var devices: Set<String>
        /// Sessions this one interrupted, told when it releases.
        var interrupted: [any InterruptibleSession]
    }

    private let holders = Locked<[ObjectIdentifier: Holder]>([:])

    /// Registers `session` as holding `devices`; returns the sessions it must interrupt first.
    func claim(_ devices: Set<String>, by session: any InterruptibleSession, mixing: Bool) -> [any InterruptibleSession] {
        holders.withLock { holders in
            let me = ObjectIdentifier(session)
            var victims: [any InterruptibleSession] = []
            if !mixing {
                for (id, holder) in holders where id != me && !holder.devices.isDisjoint(with: devices) {
                    victims.append(holder.session)
                    holders[id] = nil
                }
            }
            var mine = holders[me] ?? Holder(session: session, devices: [], interrupted: [])
            mine.devices.formUnion(devices)
            mine.interrupted.append(contentsOf: victims)
            holders[me] = mine
            return victims
        }
    }

    /// Forgets what `session` holds (it was interrupted: the others stay to be told later).
    func drop(_ session: any InterruptibleSession) -> [any InterruptibleSession] {
        holders.withLock { $0.removeValue(forKey: ObjectIdentifier(session))?.interrupted ?? [] }
    }

    /// Releases everything `session` holds; returns the sessions whose interruption now ends.
    func release(_ session: any InterruptibleSession) -> [any InterruptibleSession] {
        drop(session)
    }
}
