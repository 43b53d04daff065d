import AudioSession
import CallCore
import Foundation

/// What a call's performer (CallKit's provider side) reports to the ``CallManager``: one
/// typed message per thing that happened, taken by ``CallManager/report(_:)``.
public enum CallReport: Sendable, Equatable {
    /// An action was done (CallKit's `action.fulfill()`).
    case fulfilled(ActionID)
    /// An action could not be done (`action.fail()`), with why.
    case failed(ActionID, reason: String)
    /// A call from a peer (`reportNewIncomingCall`).
    case newIncomingCall(UUID, CallUpdate)
    case callUpdated(UUID, CallUpdate)
    /// Signaling progress: invitation sent, offer and answer exchanged.
    case progress(UUID, CallProgress)
    /// Media connected (ICE ready, keys in place): fulfils the answer.
    case mediaConnected(UUID)
    case connectionLost(UUID)
    case connectionRestored(UUID)
    /// The call ended for a reason outside the app's actions.
    case callEnded(UUID, CallEndReason)

    /// The call the report is about (nil for action outcomes, which name an action).
    public var call: UUID? {
        switch self {
        case .fulfilled, .failed: nil
        case let .newIncomingCall(uuid, _), let .callUpdated(uuid, _), let .progress(uuid, _), let .mediaConnected(uuid),
             let .connectionLost(uuid), let .connectionRestored(uuid), let .callEnded(uuid, _):
            uuid
        }
    }
}

/// Why ``CallManager/report(_:)`` refused a report: the error of the matching method.
public enum CallReportFailure: Error, Sendable, Equatable, CustomStringConvertible {
    case action(ActionError)
    case incoming(IncomingCallError)
    case call(CallReportError)

    public var description: String {
        switch self {
        case let .action(error): error.description
        case let .incoming(error): error.description
        case let .call(error): error.description
        }
    }
}

extension CallManager {
    /// Takes one report from the performer (CallKit's provider side): the one typed inbound
    /// message for everything the call's owner tells the manager. The `report…`, ``fulfill(_:)``
    /// and ``fail(_:reason:)`` methods are thin wrappers over the same work.
    ///
    /// - Throws: ``CallReportFailure`` wrapping the error the matching method throws.
    public func report(_ report: CallReport) async throws(CallReportFailure) {
        switch report {
        case let .fulfilled(id):
            do throws(ActionError) { try await fulfill(id) } catch { throw .action(error) }
        case let .failed(id, reason):
            do throws(ActionError) { try await fail(id, reason: reason) } catch { throw .action(error) }
        case let .newIncomingCall(uuid, update):
            do throws(IncomingCallError) { try reportNewIncomingCall(uuid, update: update) } catch { throw .incoming(error) }
        case let .callUpdated(uuid, update):
            do throws(CallReportError) { try reportCallUpdated(uuid, update: update) } catch { throw .call(error) }
        case let .progress(uuid, progress):
            do throws(CallReportError) { try reportProgress(uuid, progress) } catch { throw .call(error) }
        case let .mediaConnected(uuid):
            do throws(CallReportError) { try await reportMediaConnected(uuid) } catch { throw .call(error) }
        case let .connectionLost(uuid):
            do throws(CallReportError) { try reportConnectionLost(uuid) } catch { throw .call(error) }
        case let .connectionRestored(uuid):
            do throws(CallReportError) { try reportConnectionRestored(uuid) } catch { throw .call(error) }
        case let .callEnded(uuid, reason):
            do throws(CallReportError) { try reportCallEnded(uuid, reason: reason) } catch { throw .call(error) }
        }
    }
}
