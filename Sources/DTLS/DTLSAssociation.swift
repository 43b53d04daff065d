import Clocks
import Locking

/// Runs a ``DTLSEndpoint`` over a datagram path for the life of a call: the handshake with
/// its retransmissions, then whatever the peer still sends (a retransmitted last flight, a
/// close_notify). ``keys()`` waits for the handshake's outcome.
///
/// The path hands DTLS datagrams to ``receive(_:)`` (first byte 20–63, RFC 7983) from any
/// thread; the association sends through the closure it was given.
public final class DTLSAssociation: Sendable {
    public let endpoint: DTLSEndpoint
    private let events: AsyncStream<Event>.Continuation
    private let pump: Task<Void, Never>
    private let outcome: Locked<Outcome>
    private let send: @Sendable ([UInt8]) async -> Void

    enum Event: Sendable {
        case datagram([UInt8])
        case tick
    }

    struct Outcome {
        var result: Result<DTLSKeys, DTLSError>?
        var waiters: [CheckedContinuation<Result<DTLSKeys, DTLSError>, Never>] = []
        var handshakeTime: Duration?
    }

    /// Starts the handshake at once (a client sends its first flight).
    ///
    /// - Parameters:
    ///   - handshakeTimeout: how long the handshake may take before it fails as
    ///     ``DTLSError/timedOut(_:)``.
    ///   - clock: the time the timeout and the retransmission ticks keep.
    ///   - send: carries one datagram to the peer.
    public init(endpoint: DTLSEndpoint, handshakeTimeout: Duration = .seconds(10), clock: TimerClock = .continuous,
                send: @escaping @Sendable ([UInt8]) async -> Void) {
        self.endpoint = endpoint
        self.send = send
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(128))
        events = continuation
        let outcome = Locked(Outcome())
        self.outcome = outcome
        pump = Task {
            await Self.run(endpoint, events: stream, ticks: continuation, timeout: handshakeTimeout, clock: clock, send: send, outcome: outcome)
        }
    }

    deinit {
        events.finish()
        pump.cancel()
    }

    /// A DTLS datagram from the peer. Callable from any thread.
    public func receive(_ datagram: [UInt8]) {
        events.yield(.datagram(datagram))
    }

    /// The SRTP keys, once the handshake has finished and the peer's certificate matched.
    /// - Throws: ``DTLSError`` when it failed, timed out or was closed first.
    public func keys() async throws(DTLSError) -> DTLSKeys {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<DTLSKeys, DTLSError>, Never>) in
            let done = outcome.withLock { state -> Result<DTLSKeys, DTLSError>? in
                if let result = state.result { return result }
                state.waiters.append(continuation)
                return nil
            }
            if let done { continuation.resume(returning: done) }
        }
        return try result.get()
    }

    /// The keys, once the handshake has succeeded; `nil` before and after a failure.
    public var established: DTLSKeys? { outcome.withLock { state in try? state.result?.get() } }

    /// How long the handshake took, once it has finished.
    public var handshakeTime: Duration? { outcome.withLock { $0.handshakeTime } }

    /// Sends a close_notify if connected and stops; a handshake still running fails as
    /// ``DTLSError/closed``.
    public func close() async {
        for datagram in endpoint.close() { await send(datagram) }
        Self.report(.failure(.closed), to: outcome, after: nil)
        events.finish()
    }

    /// How long after this side last sent a flight it sends the same datagrams again, while the
    /// handshake runs and OpenSSL has not resent it itself: through half the datagrams lost
    /// each way a flight and its answer get through one time in four, and each of the
    /// handshake's four crossings waits for a copy that arrives. A quarter second, OpenSSL's
    /// own first wait: on a clean path the answer comes long before (no copy is sent).
    public static let repeatInterval: Duration = .milliseconds(250)
    /// How many copies of the flight that finished the handshake on this side follow it, one
    /// every ``repeatInterval``: with half the datagrams lost, all six are lost one time in 64.
    public static let finalFlightCopies = 6

    private static func run(_ endpoint: DTLSEndpoint, events: AsyncStream<Event>, ticks: AsyncStream<Event>.Continuation,
                            timeout: Duration, clock: TimerClock, send: @Sendable ([UInt8]) async -> Void, outcome: Locked<Outcome>) async {
        let started = clock.now
        // OpenSSL's retransmission timer (``DTLSEndpoint/retransmissionWaits``) and the repeats
        // between its resends: a tick every 50 ms is close enough to both, and stops once the
        // handshake is over.
        let ticker = Task {
            while !Task.isCancelled {
                try? await clock.sleep(for: .milliseconds(50))
                ticks.yield(.tick)
            }
        }
        defer { ticker.cancel() }
        var progress = endpoint.start()
        for datagram in progress.send { await send(datagram) }
        // The last flight this side sent, sent again while OpenSSL's own timer is quiet.
        var lastFlight = progress.send, lastSent = clock.now
        // Copies of the flight that finished the handshake here still to send (see below).
        var finalCopies = 0
        var reported = false
        func settle(_ state: DTLSState, sent: [[UInt8]]) {
            guard !reported else { return }
            switch state {
            case .handshaking: return
            case let .connected(keys):
                report(.success(keys), to: outcome, after: clock.now - started)
                // The side whose flight finished the handshake (a server's ChangeCipherSpec
                // and Finished) is done, but its peer is not until that flight arrives, and
                // OpenSSL sends it again only when the peer resends its own. Through heavy loss
                // that can take the rest of the peer's time (and this side, with media on and
                // none heard, takes the path for lost and restarts ICE under it): a few copies
                // now make it arrive at once.
                if !sent.isEmpty { finalCopies = finalFlightCopies }
            case let .failed(error): report(.failure(error), to: outcome, after: nil)
            case .closed: report(.failure(.closed), to: outcome, after: nil)
            }
            reported = true
            if finalCopies == 0 { ticker.cancel() }
        }
        settle(progress.state, sent: progress.send)
        for await event in events {
            switch event {
            case let .datagram(bytes): progress = endpoint.receive(bytes)
            case .tick:
                if reported {
                    guard finalCopies > 0, clock.now - lastSent >= repeatInterval else { continue }
                    for datagram in lastFlight { await send(datagram) }
                    lastSent = clock.now
                    finalCopies -= 1
                    if finalCopies == 0 { ticker.cancel() }
                    continue
                }
                if clock.now - started > timeout {
                    report(.failure(.timedOut(timeout)), to: outcome, after: nil)
                    reported = true
                    ticker.cancel()
                    continue
                }
                progress = endpoint.handleTimeout()
                if progress.send.isEmpty, !lastFlight.isEmpty, clock.now - lastSent >= repeatInterval,
                   case .handshaking = progress.state {
                    // OpenSSL gives a flight up after twelve resends of its own (paced to span
                    // 25.75 s): copies of the same records in between are more tries that do
                    // not count against it. A copy of a record the peer has is dropped there as
                    // a replay; one that replaces a lost datagram moves the handshake on.
                    for datagram in lastFlight { await send(datagram) }
                    lastSent = clock.now
                    continue
                }
            }
            for datagram in progress.send { await send(datagram) }
            if !progress.send.isEmpty && !reported {
                lastFlight = progress.send
                lastSent = clock.now
            }
            settle(progress.state, sent: progress.send)
        }
        settle(.failed(.closed), sent: [])
    }

    /// Records the first outcome and wakes everyone waiting for it; later ones are ignored.
    private static func report(_ result: Result<DTLSKeys, DTLSError>, to outcome: Locked<Outcome>, after time: Duration?) {
        let waiters = outcome.withLock { state -> [CheckedContinuation<Result<DTLSKeys, DTLSError>, Never>] in
            guard state.result == nil else { return [] }
            state.result = result
            state.handshakeTime = time
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: result) }
    }
}
