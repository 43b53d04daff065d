import AudioDevices

/// What is mixed into a call and taken out of it besides the microphone and the speaker: the
/// gains, app audio (prompts, music) over the microphone, and a recording tap taken on demand.
/// Each is set here and applied on the tick (`sendFrame`, `deliver`).
extension MediaActor {
    /// Microphone gain, 0–4 (1 = unchanged).
    public func setMicrophoneVolume(_ volume: Double) {
        microphoneVolume = max(0, min(4, volume))
    }

    /// Sets either gain (0–4; nil leaves it) and returns both as they are now.
    public func setVolumes(microphone: Double?, output: Double?) -> CallVolumes {
        if let microphone { microphoneVolume = max(0, min(4, microphone)) }
        if let output { outputVolume = max(0, min(4, output)) }
        return CallVolumes(microphone: microphoneVolume, output: outputVolume)
    }

    /// Mixes `source` (a prompt, music) into what is sent at `volume` (0–4); `nil` removes it.
    /// A mono source at another rate than ``captureFormat`` is resampled to it.
    public func setAppAudio(_ source: (any AudioSource)?, volume: Double = 1) throws(MediaError) {
        appAudio?.source.stop()
        appAudio = nil
        guard let source else { return }
        let adapted = try atCaptureRate(source, what: "app audio")
        do throws(AudioDeviceError) { try adapted.start() } catch { throw .device(error) }
        appAudio = (adapted, max(0, min(4, volume)))
    }

    /// `source` as the call sends it: itself at the capture rate, else resampled to it.
    func atCaptureRate(_ source: any AudioSource, what: String) throws(MediaError) -> any AudioSource {
        guard source.format.channels == 1 else { throw .invalidConfiguration("\(what) must be mono") }
        if source.format.sampleRate == self.source.format.sampleRate { return source }
        guard let adapted = ResampledSource(source, to: self.source.format.sampleRate) else {
            throw .invalidConfiguration("\(what) at \(source.format.sampleRate) Hz cannot be resampled to the call's \(self.source.format.sampleRate) Hz")
        }
        return adapted
    }

    /// Records the call from now on into `sink` (mono, at the call's rate): what is heard, and
    /// with `mixingSent` what is sent mixed in; `nil` stops the recording (its sink is stopped).
    /// A held call records silence, so the recording keeps to the call's time.
    /// - Throws: ``MediaError/device(_:)`` when the sink cannot start (nothing changes then).
    public func setTap(_ sink: (any AudioSink)?, mixingSent: Bool = false) throws(MediaError) {
        if let sink {
            guard sink.format.sampleRate == self.sink.format.sampleRate, sink.format.channels == 1 else {
                throw .invalidConfiguration("a recording must be mono at \(self.sink.format.sampleRate) Hz")
            }
            do throws(AudioDeviceError) { try sink.start() } catch { throw .device(error) }
        }
        tap?.sink.stop()
        tap = sink.map { ($0, mixingSent) }
        tapSentFrame = [Int16](repeating: 0, count: captureFrame.count)
        // What was sent, at the rate what is heard is played (a G.711 call's source at 8 kHz
        // and its speaker at 48), so the recording has both.
        let (sent, heard) = (self.source.format.sampleRate, self.sink.format.sampleRate)
        tapSentResampler = mixingSent && sink != nil && sent != heard ? Resampler(from: sent, to: heard) : nil
        tapSentResampled = [Int16](repeating: 0, count: tapSentResampler == nil ? 0 : playFrame.count)
    }
}
