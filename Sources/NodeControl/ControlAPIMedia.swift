import AudioDevices
import CallNode
import Foundation
import Media

/// Prompts played into calls and recordings made of them: what the API starts, and stops when
/// asked or at the call's end.
extension ControlAPI {
    func play(into call: ObservedCall, _ body: [String: Any]) async throws -> ControlResponse {
        guard call.hasConnected else {
            throw Problem(status: 409, reason: "the call is \(Self.status(of: call)): prompts play into a connected call")
        }
        guard body["loop"] == nil || body["loop"] is Bool else { throw Problem(status: 400, reason: "loop must be true or false") }
        let loops = body["loop"] as? Bool ?? false
        let volume = try number(body, "volume", in: 0...4) ?? 1
        let playback = UUID(), id = call.id, events = self.events
        let weakState = WeakState(self)
        let finished: @Sendable () -> Void = {
            // On the media path: only hand it over.
            guard weakState.api?.finishPlayback(playback, of: id) == true else { return }
            events.publish(["event": "playback-finished", "call": id.uuidString, "playback": playback.uuidString])
        }
        let source: PromptSource
        do {
            if let file = body["file"] as? String {
                source = try PromptSource(path: file, loops: loops, finished: finished)
            } else if let frequency = try number(body, "tone", in: 20...20_000) {
                source = try PromptSource(tone: frequency, seconds: try number(body, "seconds", in: 0.01...600) ?? 1,
                                          loops: loops, finished: finished)
            } else {
                throw Problem(status: 400, reason: "give a WAV file {\"file\": \"/path/prompt.wav\"} or a tone {\"tone\": 440, \"seconds\": 1}")
            }
        } catch let error as AudioDeviceError {
            throw Problem(status: 400, reason: "\(error)")
        }
        let replaced = state.withLock { state -> Playback? in
            let before = state.playbacks[id]
            state.playbacks[id] = Playback(id: playback, source: source)
            return before
        }
        replaced?.source.stop()
        do {
            try await nodeCall { () async throws(CallNodeError) in try await node.play(source, into: id, volume: volume) }
        } catch {
            state.withLock { state in
                if state.playbacks[id]?.id == playback { state.playbacks[id] = nil }
            }
            throw error
        }
        if let replaced {
            events.publish(["event": "playback-stopped", "call": id.uuidString, "playback": replaced.id.uuidString])
        }
        return ControlResponse(202, ["playback": playback.uuidString, "call": id.uuidString,
                                     "seconds": EventJSON.seconds(source.duration), "loop": loops])
    }

    /// The playback finished on its own: forgotten (true), unless another replaced it.
    func finishPlayback(_ playback: UUID, of call: UUID) -> Bool {
        state.withLock { state in
            guard state.playbacks[call]?.id == playback else { return false }
            state.playbacks[call] = nil
            return true
        }
    }

    func record(_ call: ObservedCall, _ body: [String: Any]) async throws -> ControlResponse {
        guard call.hasConnected else {
            throw Problem(status: 409, reason: "the call is \(Self.status(of: call)): a connected call is recorded")
        }
        guard body["path"] == nil || (body["path"] as? String)?.isEmpty == false else {
            throw Problem(status: 400, reason: "give where to record, {\"path\": \"/var/lib/callnode/message.wav\"}, or nothing (the node's recordings folder)")
        }
        let path = try body["path"] as? String ?? defaultRecordingPath(call.id)
        guard body["sides"] == nil || body["sides"] is String else { throw Problem(status: 400, reason: "sides must be both or received") }
        let sides = body["sides"] as? String ?? "both"
        guard ["both", "received"].contains(sides) else {
            throw Problem(status: 400, reason: "sides must be both (what is heard and sent, mixed) or received (what is heard)")
        }
        let directory = (path as NSString).deletingLastPathComponent
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory.isEmpty ? "." : directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw Problem(status: 400, reason: "no directory \(directory) to record into")
        }
        let sink = WAVFileSink(path: path)
        let id = call.id, events = self.events
        // The call's slot is taken before the media is asked, so two requests at once cannot
        // both record (the second is refused).
        let taken = state.withLock { state -> Bool in
            guard state.recordings[id] == nil else { return false }
            state.recordings[id] = Recording(path: path, sink: sink)
            return true
        }
        guard taken else { throw Problem(status: 409, reason: "the call is being recorded already (DELETE …/record stops it)") }
        let weakState = WeakState(self)
        sink.onFailure { reason in
            guard let recording = weakState.api?.state.withLock({ $0.recordings.removeValue(forKey: id) }) else { return }
            events.publish(["event": "recording-stopped", "call": id.uuidString, "path": path, "reason": "failed: \(reason)",
                            "seconds": Double(recording.sink.samplesWritten) / Double(recording.sink.format.sampleRate)])
        }
        do {
            try await nodeCall { () async throws(CallNodeError) in try await node.record(id, into: sink, mixingSent: sides == "both") }
        } catch {
            state.withLock { state in
                if state.recordings[id]?.sink === sink { state.recordings[id] = nil }
            }
            throw error
        }
        // The call's Recents row names its recording (the console plays it from there).
        await node.manager.setRecording(path, of: id)
        events.publish(["event": "recording-started", "call": id.uuidString, "path": path, "sides": sides])
        return ControlResponse(201, ["call": id.uuidString, "path": path, "sides": sides])
    }

    /// Where a recording goes when the request names no file: `HOME/recordings/`, one file per
    /// call and start (made with the folder, this user's only).
    func defaultRecordingPath(_ call: UUID) throws -> String {
        let folder = (node.configuration.home as NSString).appendingPathComponent("recordings")
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw Problem(status: 500, reason: "cannot make the recordings folder \(folder): \(error.localizedDescription)")
        }
        let stamp = Int(Date().timeIntervalSince1970)
        return (folder as NSString).appendingPathComponent("\(stamp)-\(call.uuidString.prefix(8).lowercased()).wav")
    }

    /// Stops `call`'s recording, if it has one: what it recorded, said to readers too.
    func stopRecording(_ call: UUID, reason: String) async throws -> [String: Any]? {
        guard let recording = state.withLock({ $0.recordings.removeValue(forKey: call) }) else { return nil }
        try? await nodeCall { () async throws(CallNodeError) in try await node.record(call, into: nil) }
        recording.sink.stop()
        let seconds = Double(recording.sink.samplesWritten) / Double(recording.sink.format.sampleRate)
        let object: [String: Any] = ["event": "recording-stopped", "call": call.uuidString, "path": recording.path,
                                     "seconds": (seconds * 100).rounded() / 100, "reason": reason]
        events.publish(object)
        var answer = object
        answer["event"] = nil
        return answer
    }
}

/// The API, weakly: a prompt's end handler lives in the media path, which must not keep the
/// API alive.
final class WeakState: Sendable {
    weak let api: ControlAPI?
    init(_ api: ControlAPI) { self.api = api }
}
