import AudioDevices


/// Devices that fail mid-call (a USB headset unplugged, a sound server's sink removed): the
/// session checks its open devices while active and falls back, or says it cannot.
extension AudioSessionOwner {
    // MARK: Devices that fail mid-call

    /// Checks the open devices every ``deviceCheckInterval`` on the session's clock while active
    /// — when one of them can fail at all (files, tones and null outputs cannot: no check then).
    func startHealthWatch() {
        guard healthWatch == nil, !isShutDown else { return }
        let checkable = devices.state.withLock { ($0.capture?.canFail ?? false) || ($0.playback?.canFail ?? false) }
        guard checkable else { return }
        let clock = self.clock, interval = deviceCheckInterval
        healthWatch = Task { [weak self] in
            while !Task.isCancelled {
                do { try await clock.sleep(until: clock.now + interval) } catch { return }
                guard let self else { return }
                await self.checkDevices()
            }
        }
    }

    func stopHealthWatch() {
        healthWatch?.cancel()
        healthWatch = nil
    }

    /// A device that failed for good (unplugged, its sound server gone) is replaced by the
    /// backend's fallback or its default, whichever opens, and reported as a route change
    /// (``AudioRouteChangeReason/oldDeviceUnavailable(_:)``); with none, ``AudioSessionEvent/deviceFailed(_:)``.
    public func checkDevices() {
        guard case var .active(route) = state else { return }
        let (captureFailure, playbackFailure) = devices.state.withLock { ($0.capture?.failure, $0.playback?.failure) }
        if let failure = captureFailure, let input = route.input {
            route.input = replaceFailed(input, isInput: true, failure: failure)
        }
        if let failure = playbackFailure, let output = route.output {
            route.output = replaceFailed(output, isInput: false, failure: failure)
        }
        state = .active(route)
    }

    /// Opens the first fallback for `failed` that works and puts it in place; returns the
    /// device in use after (nil: none).
    private func replaceFailed(_ failed: String, isInput: Bool, failure: String) -> String? {
        let backend = currentBackend, format = configuration.format, mode = configuration.mode
        let lost = knownRoutes.first { $0.name == failed } ?? AudioRoute(name: failed, label: failed, isInput: isInput, isOutput: !isInput)
        broadcaster.send(.routeChanged(.oldDeviceUnavailable(lost)))
        var candidates: [String] = []
        for candidate in isInput ? [backend.fallbackInput, backend.defaultInput] : [backend.fallbackOutput, backend.defaultOutput] {
            if let candidate, candidate != failed, !candidates.contains(candidate) { candidates.append(candidate) }
        }
        var refusals: [String] = []
        for candidate in candidates {
            do throws(AudioDeviceError) {
                if isInput {
                    let source = backend.makeCapture(device: candidate, format: format, mode: mode)
                    try source.start()
                    install(capture: source)
                    openInput = candidate
                } else {
                    let sink = backend.makePlayback(device: candidate, format: format, mode: mode)
                    try sink.start()
                    install(playback: sink)
                }
                return candidate
            } catch {
                refusals.append("\(candidate): \(error)")
            }
        }
        let kind = isInput ? "input" : "output"
        var message = "the audio \(kind) '\(failed)' failed (\(failure))"
        message += candidates.isEmpty ? " and there is no other \(kind) to fall back to" : "; no fallback would open (\(refusals.joined(separator: "; ")))"
        // Closed, so that the failure is reported once; media reads silence and plays nowhere.
        if isInput {
            install(capture: nil)
            openInput = nil
        } else {
            install(playback: nil)
        }
        broadcaster.send(.deviceFailed(message))
        return nil
    }

    /// Puts `source` in place of the open capture (nil: none) and stops the old one.
    private func install(capture source: (any AudioSource)?) {
        devices.state.withLock { open -> (any AudioSource)? in
            defer { open.capture = source }
            return open.capture
        }?.stop()
    }

    /// Puts `sink` in place of the open playback (nil: none) and stops the old one.
    private func install(playback sink: (any AudioSink)?) {
        devices.state.withLock { open -> (any AudioSink)? in
            defer { open.playback = sink }
            return open.playback
        }?.stop()
    }
}
