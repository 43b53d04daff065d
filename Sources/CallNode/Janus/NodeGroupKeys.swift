import CallCore
import Foundation
import JanusRoom
import Locking
import Media
import Signaling

/// An end-to-end encrypted group this node is in: its keys and the feeds it hears.
struct GroupState: Sendable {
    var ring: GroupKeyRing
    /// Each publisher's feed, by the room's id for the publisher.
    var feeds: [String: UUID] = [:]
}

extension CallNode {
    /// How long a member's node has to take this node's key before the send is given up.
    static let groupKeyTimeout: Duration = .seconds(5)

    // MARK: - The group's course (called as the group's publishing call hears of the room)

    /// A participant is in the group's room: the keys for its feed (nil: not an encrypted group).
    func groupArrived(_ publishing: UUID, _ participant: RoomParticipant) -> FrameKeys? {
        guard groups[publishing] != nil else { return nil }
        var inbound: FrameEncryptionKey?
        decide(publishing) { group in
            defer { inbound = group.ring.feedKey(participant.id) }
            return group.ring.arrived(participant)
        }
        // No key yet: its frames do not open until one comes.
        return FrameKeys(outbound: .random(), inbound: inbound ?? .random())
    }

    /// The participant's feed is this call.
    func groupFeedPlaced(_ publishing: UUID, participant: String, feed: UUID) {
        decide(publishing) { group in
            group.feeds[participant] = feed
            return group.ring.feedPlaced(participant)
        }
    }

    func groupDeparted(_ publishing: UUID, participant: String) {
        decide(publishing) { group in
            group.feeds[participant] = nil
            return group.ring.departed(participant)
        }
    }

    /// Lets the group's value decide, keeps what it became, and performs what it said.
    private func decide(_ publishing: UUID, _ decision: (inout GroupState) -> [GroupKeyRing.Action]) {
        guard var group = groups[publishing] else { return }
        let actions = decision(&group)
        groups[publishing] = group
        perform(actions, in: publishing)
    }

    /// The feed ended (its publisher is still in the room: it may be asked for again).
    func groupFeedEnded(_ publishing: UUID, participant: String) {
        groups[publishing]?.feeds[participant] = nil
    }

    func groupEnded(_ publishing: UUID) {
        groups[publishing] = nil
    }

    /// The keys of the encrypted group whose publishing call is `publishing`, as they are now:
    /// this node's sender key and each member's it holds (nil: no such group).
    @_spi(Simulation)
    public func groupKeys(_ publishing: UUID) -> (own: FrameEncryptionKey, members: [Fingerprint: FrameEncryptionKey])? {
        groups[publishing].map { ($0.ring.ownKey, $0.ring.receivedKeys) }
    }

    /// A member's node sent its key: its feed opens with it from now on.
    func groupKeyReceived(_ grant: GroupKeyGrant, on connection: SignalingConnection) async {
        var refusal = "this node is in no encrypted group in room \(grant.room)"
        for (publishing, var group) in groups where group.ring.room == grant.room {
            switch group.ring.received(grant, from: connection.peer) {
            case let .success(actions):
                groups[publishing] = group
                perform(actions, in: publishing)
                logger.info("room \(grant.room): key \(grant.epoch) of \(connection.peer.short) taken")
                try? await connection.send(.groupKeyTaken(epoch: grant.epoch, refused: nil), call: nil)
                return
            case let .failure(why):
                refusal = why.description
            }
        }
        logger.notice("room \(grant.room): refused a key from \(connection.peer.short): \(refusal)")
        try? await connection.send(.groupKeyTaken(epoch: grant.epoch, refused: refusal), call: nil)
    }

    /// Replaces a call's frame keys while it runs (nil leaves one): what an end-to-end
    /// encrypted group does when a member's key changes.
    /// - Throws: ``CallNodeError/noSuchCall(_:)``.
    func setFrameKeys(_ call: UUID, outbound: FrameEncryptionKey?, inbound: FrameEncryptionKey?) throws(CallNodeError) {
        guard let leg = legs[call] else { throw .noSuchCall(call) }
        leg.post(.frameKeys(outbound: outbound, inbound: inbound))
    }

    private func perform(_ actions: [GroupKeyRing.Action], in publishing: UUID) {
        let room = groups[publishing]?.ring.room ?? "?"
        for action in actions {
            switch action {
            case let .send(grant, member):
                keepUntilDone { [weak self] in
                    guard let self, let problem = await self.sendGroupKey(grant, to: member) else { return }
                    self.logger.notice("room \(room): this node's key did not reach \(member.fingerprint.short) at \(member.address): \(problem)")
                }
            case let .rotate(key, grant, members):
                keepUntilDone { [weak self] in
                    guard let self else { return }
                    // Every member who stays has the new key (or could not be reached) before
                    // it seals: the others open frames sealed with the old one until then.
                    await withTaskGroup(of: Void.self) { sends in
                        for member in members {
                            sends.addTask {
                                guard let problem = await self.sendGroupKey(grant, to: member) else { return }
                                self.logger.notice("room \(room): the new key did not reach \(member.fingerprint.short): \(problem)")
                            }
                        }
                    }
                    try? await self.setFrameKeys(publishing, outbound: key, inbound: nil)
                    self.logger.info("room \(room): a member left; sealing with key \(grant.epoch)")
                }
            case let .openFeed(participant, key):
                if let feed = groups[publishing]?.feeds[participant] { try? setFrameKeys(feed, outbound: nil, inbound: key) }
            case let .groupEvent(event):
                broadcaster.send(.room(publishing, event))
            case let .feedEvent(participant, event):
                if let feed = groups[publishing]?.feeds[participant] { broadcaster.send(.room(feed, event)) }
            }
        }
    }

    /// Sends `grant` to `member`'s node over a connection pinned to its identity; the problem,
    /// or nil once the member's node took the key.
    nonisolated func sendGroupKey(_ grant: GroupKeyGrant, to member: GroupMember) async -> String? {
        let outcome = Locked<String?>("it did not answer in \(Self.groupKeyTimeout)")
        let clock = configuration.clock
        let body: @Sendable (SignalingConnection, SignalMessages) async -> Void = { connection, messages in
            let timeout = Task {
                try? await clock.sleep(for: Self.groupKeyTimeout)
                if !Task.isCancelled { connection.close() }
            }
            defer { timeout.cancel() }
            do throws(SignalingError) { try await connection.send(.groupKey(grant), call: nil) } catch {
                outcome.withLock { $0 = "\(error)" }
                return
            }
            for await item in messages {
                guard case let .success(envelope) = item, case let .groupKeyTaken(epoch, refused) = envelope.message, epoch == grant.epoch else { continue }
                outcome.withLock { $0 = refused.map { "it refused the key: \($0)" } }
                connection.close()
                return
            }
        }
        do {
            if let network = configuration.signalNetwork {
                try await network.connect(to: member.address, as: identity, pin: member.fingerprint, body)
            } else {
                try await SignalingClient.connect(host: member.address.host, port: member.address.port, identity: identity,
                                                  pin: member.fingerprint, limits: configuration.signalingLimits, body)
            }
        } catch {
            return "\(error)"
        }
        return outcome.withLock { $0 }
    }
}
