/// One call's place on the session's audio bridge.
public struct BridgePortID: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
    public var description: String { "port \(rawValue)" }
}

/// What a bridge port carries.
public enum BridgePortMode: Sendable, Equatable {
    /// The port takes the microphone (and, in a conference, the other members' audio) and its
    /// audio is played on the speaker.
    case active
    /// Nothing either way: the port reads silence and what it plays is replaced by silence
    /// (a held call). It keeps its place on the output's timeline.
    case held
}

/// The session's audio bridge, as a value: each call has a port; the microphone is read once
/// per sample and copied to every port (never split between them); what the ports play is
/// summed with saturation and written once; ports in a conference also hear each other.
///
/// Ports tick on their own (a real-time media clock ticks calls concurrently, in phases), so
/// the bridge keeps one timeline per direction and a cursor per port on it instead of assuming
/// an order:
/// - **Capture**: the port furthest ahead reads the device; the others read the same samples
///   from a short window behind it. A port that falls more than ``maximumLag`` behind (held,
///   stopped, paused) starts again at the newest audio.
/// - **Playback**: each port adds what it plays at its own cursor; samples are written to the
///   device once every live port has added its part, so one port alone plays with no added
///   delay and several are summed sample for sample. A port more than ``maximumLag`` behind
///   the others is not waited for; what it plays later joins the timeline where it stands.
/// - **Conferences**: what members play is also summed into the conference's mix at its
///   place on the playback timeline; each member hears the mix, less its own part, up to
///   where every other live member has played.
///
/// The anchors are PJSIP's conference bridge and baresip's `aumix`. Plain value, no locking:
/// ``SessionDevices`` holds it under its lock and tests drive it directly.
public struct AudioBridge: Sendable {
    struct Port: Sendable {
        var mode = BridgePortMode.active
        /// The conference the port is joined to, if any.
        var conference: Int?
        /// Where the port reads next on the capture timeline (nil until its first read).
        var captureCursor: Int?
        /// Where the port adds next on the playback timeline (nil until its first write).
        var playbackCursor: Int?
        /// Where the port next hears its conference, on the playback timeline (nil until it
        /// first hears the others).
        var mixCursor: Int?
        /// What the port added to its conference's mix, sample for sample with the mix's sums
        /// (from the mix's start; none past its end): taken back out of what it hears. Kept
        /// aligned with the mix rather than with the port's own writes, so a write that lands
        /// after a gap (the port's ticks came late and the timeline had moved on) cannot lose
        /// the record of what it added before it, which the port would then hear.
        var own: [Int32] = []

        /// Forgets where it heard the conference and what it added to it.
        mutating func resetConference() {
            mixCursor = nil
            own.removeAll(keepingCapacity: true)
        }
    }

    /// A conference's mix: every active member's played audio summed at its place on the
    /// playback timeline, for [start, start + sums.count). A member hears the mix less its own
    /// part, where every other member has played: one sum per sample however many members
    /// (a buffer per pair of members grew with the square of the conference).
    struct ConferenceMix: Sendable {
        var start = 0
        var sums: [Int32] = []
        var end: Int { start + sums.count }
    }

    /// What a write produced for the device: samples to play, or a stretch to fill as skipped
    /// (the process was paused and no port played anything there).
    public enum Output: Sendable, Equatable {
        case play([Int16])
        case skipped(Int)
    }

    /// How far (in samples) a port may fall behind the others before the bridge stops keeping
    /// audio for it or waiting for it.
    public let maximumLag: Int

    private(set) var ports: [BridgePortID: Port] = [:]
    private var mixes: [Int: ConferenceMix] = [:]
    private var nextPort = 1
    private var nextConference = 1

    /// Captured samples [capturedStart, captureHead).
    private var captured: [Int16] = []
    private var capturedStart = 0
    private(set) var captureHead = 0

    /// Sums not yet written, for samples [flushed, flushed + pending.count); `touched` says
    /// which of them some port played (the rest were skipped by every port).
    private var pending: [Int32] = []
    private var touched: [Bool] = []
    private(set) var flushed = 0
    /// Kept between frames so a steady call allocates nothing here: the device's fresh capture,
    /// and the saturated mix handed to the output.
    private var fresh: [Int16] = []
    private var mixed: [Int16] = []
    /// A conference member's capture and the others' audio, summed wide before saturating.
    private var sums: [Int32] = []

    /// - Parameter maximumLag: In samples; three 20 ms frames at 48 kHz by default.
    public init(maximumLag: Int = 2_880) {
        self.maximumLag = max(1, maximumLag)
    }

    // MARK: Ports

    /// A new port, active, on no conference.
    public mutating func addPort() -> BridgePortID {
        defer { nextPort += 1 }
        let id = BridgePortID(rawValue: nextPort)
        ports[id] = Port()
        return id
    }

    /// Removes a port: it leaves its conference, and the bridge stops waiting for it.
    public mutating func removePort(_ id: BridgePortID) -> [Output] {
        leaveConference(id)
        ports[id] = nil
        trimCapture()
        return flush()
    }

    public var portIDs: [BridgePortID] { ports.keys.sorted() }

    public func mode(of id: BridgePortID) -> BridgePortMode? { ports[id]?.mode }

    /// Holds or resumes a port. A resumed port starts again from the newest audio.
    public mutating func setMode(_ mode: BridgePortMode, of id: BridgePortID) -> [Output] {
        guard var port = ports[id], port.mode != mode else { return [] }
        port.mode = mode
        port.captureCursor = nil
        port.mixCursor = nil
        ports[id] = port
        trimCapture()
        return flush()
    }

    /// The port stopped reading (`capture`) or playing: the bridge stops keeping audio for it
    /// or waiting for it; it starts again from the newest audio.
    @discardableResult
    public mutating func pause(_ id: BridgePortID, capture: Bool) -> [Output] {
        guard ports[id] != nil else { return [] }
        if capture {
            ports[id]?.captureCursor = nil
            return []
        }
        ports[id]?.playbackCursor = nil
        return flush()
    }

    /// Joins ports into one conference: each hears the microphone and every other member;
    /// the speaker plays them all (as it plays every active port). Members of other
    /// conferences leave them.
    public mutating func join(_ ids: [BridgePortID]) {
        let members = ids.filter { ports[$0] != nil }
        guard members.count >= 2 else { return }
        let conference = members.compactMap { ports[$0]?.conference }.min() ?? { defer { nextConference += 1 }; return nextConference }()
        for id in members where ports[id]?.conference != conference {
            leaveConference(id)
            ports[id]?.conference = conference
            ports[id]?.resetConference()
        }
    }

    /// Takes a port out of its conference; a conference left with one member ends.
    public mutating func leaveConference(_ id: BridgePortID) {
        guard let index = ports.index(forKey: id), let conference = ports.values[index].conference else { return }
        // What it played that the others have not all heard yet leaves the mix with it.
        if var mix = mixes[conference] {
            let own = ports.values[index].own
            for sample in 0..<min(own.count, mix.sums.count) { mix.sums[sample] -= own[sample] }
            mixes[conference] = mix
        }
        ports.values[index].conference = nil
        ports.values[index].resetConference()
        let rest = ports.filter { $0.value.conference == conference }.map(\.key)
        if rest.count == 1 {
            ports[rest[0]]?.conference = nil
            ports[rest[0]]?.resetConference()
        }
        if rest.count <= 1 { mixes[conference] = nil }
    }

    public func conference(of id: BridgePortID) -> [BridgePortID] {
        guard let conference = ports[id]?.conference else { return [] }
        return ports.filter { $0.value.conference == conference }.map(\.key).sorted()
    }

    // MARK: Capture

    /// The port's next `count` samples of capture: the microphone's (read from the device
    /// through `device` only when no other port read them already) plus, in a conference, the
    /// other members' audio. A held or unknown port reads silence.
    public mutating func read(_ id: BridgePortID, count: Int, device: (inout [Int16]) -> Void) -> [Int16] {
        guard count > 0 else { return [] }
        var frame = [Int16](repeating: 0, count: count)
        read(id, into: &frame, device: device)
        return frame
    }

    /// As ``read(_:count:device:)``, into `frame` (its count is the count read), without
    /// allocating once the bridge has run a frame: what a call's tick uses.
    public mutating func read(_ id: BridgePortID, into frame: inout [Int16], device: (inout [Int16]) -> Void) {
        let count = frame.count
        guard count > 0 else { return }
        // In place through the port's index (a copy of the port would share its own part of
        // the conference and make the mix below copy it).
        guard let index = ports.index(forKey: id), ports.values[index].mode == .active else {
            Self.silence(&frame)
            return
        }
        // A port's first read takes the newest audio another port already read (the ports then
        // share one device read per period) or, alone, what the device has now.
        var cursor = ports.values[index].captureCursor ?? {
            let shared = ports.contains { $0.key != id && $0.value.mode == .active && $0.value.captureCursor != nil }
            return shared ? max(capturedStart, captureHead - count) : captureHead
        }()
        if cursor < captureHead - maximumLag { cursor = captureHead }
        let needed = cursor + count - captureHead
        if needed > 0 {
            if fresh.count != needed { fresh = [Int16](repeating: 0, count: needed) } else { Self.silence(&fresh) }
            device(&fresh)
            captured.append(contentsOf: fresh)
            captureHead += needed
        }
        let from = cursor - capturedStart
        frame.withUnsafeMutableBufferPointer { out in
            captured.withUnsafeBufferPointer { all in
                out.baseAddress!.update(from: all.baseAddress! + from, count: count)  // count > 0; captured holds [from, from + count)
            }
        }
        ports.values[index].captureCursor = cursor + count
        if ports.values[index].conference != nil {
            hearConference(index, into: &frame)
        }
        trimCapture()
    }

    /// Adds what the port's conference played to `frame`, less the port's own part, summed
    /// wide and saturated once: the next stretch every other live member has played (the mix
    /// is read where it is complete, so a member that plays later in the period is not missed;
    /// a member hears the others up to a frame later than they played).
    private mutating func hearConference(_ index: Dictionary<BridgePortID, Port>.Index, into frame: inout [Int16]) {
        guard let conference = ports.values[index].conference, let mix = mixes[conference] else { return }
        let id = ports.keys[index], count = frame.count
        // Where every other live member has played to: members further behind than the lag
        // (stopped, paused) are not waited for, as on the output.
        var ahead = Int.min
        for (other, port) in ports where other != id && port.conference == conference && port.mode == .active {
            if let cursor = port.playbackCursor { ahead = max(ahead, cursor) }
        }
        guard ahead > Int.min else { return }
        var complete = Int.max
        for (other, port) in ports where other != id && port.conference == conference && port.mode == .active {
            if let cursor = port.playbackCursor, cursor >= ahead - maximumLag { complete = min(complete, cursor) }
        }
        complete = min(complete, mix.end)
        var cursor = ports.values[index].mixCursor ?? (complete - count)
        if cursor < complete - maximumLag { cursor = complete - count }
        cursor = max(cursor, mix.start)
        let available = min(count, complete - cursor)
        guard available > 0 else { return }
        if sums.count != count { sums = [Int32](repeating: 0, count: count) }
        let own = ports.values[index].own
        sums.withUnsafeMutableBufferPointer { wide in
            frame.withUnsafeBufferPointer { microphone in
                mix.sums.withUnsafeBufferPointer { all in
                    for sample in 0..<available { wide[sample] = Int32(microphone[sample]) + all[cursor - mix.start + sample] }
                }
                for sample in available..<count { wide[sample] = Int32(microphone[sample]) }
            }
            own.withUnsafeBufferPointer { mine in
                // The port's own part of that stretch, where it played there.
                let from = cursor - mix.start, to = min(from + available, mine.count)
                if from < to {
                    for sample in from..<to { wide[sample - from] -= mine[sample] }
                }
            }
        }
        frame.withUnsafeMutableBufferPointer { out in
            sums.withUnsafeBufferPointer { wide in
                for sample in 0..<count { out[sample] = Self.saturated(wide[sample]) }
            }
        }
        ports.values[index].mixCursor = cursor + available
        trimMix(conference)
    }

    /// Adds a conference member's played samples at `position` to its conference's mix, and
    /// to the member's own part at the same place.
    private mutating func addToMix(_ index: Dictionary<BridgePortID, Port>.Index, conference: Int, at position: Int, _ samples: [Int16]) {
        var mix = mixes[conference] ?? ConferenceMix(start: position)
        let skip = max(0, mix.start - position)  // a stretch already let go
        guard skip < samples.count else { return }
        mixes[conference] = nil  // held here while it changes: no second reference to copy
        let base = position - mix.start, end = base + samples.count
        if end > mix.sums.count { mix.sums.append(contentsOf: repeatElement(0, count: end - mix.sums.count)) }
        if end > ports.values[index].own.count {
            ports.values[index].own.append(contentsOf: repeatElement(0, count: end - ports.values[index].own.count))
        }
        samples.withUnsafeBufferPointer { played in
            mix.sums.withUnsafeMutableBufferPointer { all in
                for sample in skip..<played.count { all[base + sample] += Int32(played[sample]) }
            }
            ports.values[index].own.withUnsafeMutableBufferPointer { mine in
                for sample in skip..<played.count { mine[base + sample] += Int32(played[sample]) }
            }
        }
        mixes[conference] = mix
    }

    /// Lets go of the stretch of a conference's mix every member has heard, or that is further
    /// back than any member may still read.
    private mutating func trimMix(_ conference: Int) {
        guard var mix = mixes[conference] else { return }
        // A member reads no further back than the lag behind where all have played, which is
        // itself no more than the lag behind the newest.
        var oldest = mix.end - 2 * maximumLag
        // Sooner once every member has heard a stretch (one that has not yet heard anything
        // may start a frame behind where the others have played).
        var readers = Int.max
        for port in ports.values where port.conference == conference {
            readers = min(readers, port.mixCursor ?? Int.min)
        }
        oldest = max(oldest, min(readers, mix.end))
        let drop = min(mix.sums.count, oldest - mix.start)
        // In steps of a few frames: each drop moves what is kept.
        guard drop >= 4_800 else { return }
        mixes[conference] = nil
        mix.sums.removeFirst(drop)
        mix.start += drop
        mixes[conference] = mix
        // The members' own parts stay aligned with it.
        for index in ports.indices where ports.values[index].conference == conference {
            ports.values[index].own.removeFirst(min(drop, ports.values[index].own.count))
        }
    }

    private static func silence(_ samples: inout [Int16]) {
        samples.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
    }

    /// The port's clock skipped `count` samples (the process was paused): its capture cursor
    /// moves on; samples no port read are skipped on the device through `device`.
    public mutating func skipCapture(_ id: BridgePortID, count: Int, device: (Int) -> Void) {
        guard count > 0, var port = ports[id], port.mode == .active else { return }
        let cursor = (port.captureCursor ?? captureHead) + count
        if cursor > captureHead {
            device(cursor - captureHead)
            captured += [Int16](repeating: 0, count: cursor - captureHead)
            captureHead = cursor
        }
        port.captureCursor = cursor
        ports[id] = port
        trimCapture()
    }

    /// Keeps the captured samples a port may still read: the newest ``maximumLag`` of them.
    private mutating func trimCapture() {
        let oldest = captureHead - maximumLag
        let drop = min(captured.count, oldest - capturedStart)
        if drop > 0 {
            captured.removeFirst(drop)
            capturedStart += drop
        }
    }

    // MARK: Playback

    /// Adds the port's played audio to the mix; returns what is now ready for the device, in
    /// order. A held port's audio is replaced by silence; an unknown port's is discarded.
    public mutating func write(_ id: BridgePortID, _ frame: [Int16]) -> [Output] {
        var outputs: [Output] = []
        write(id, frame, into: &outputs)
        return outputs
    }

    /// As ``write(_:_:)``, appending what is ready to `outputs`: a caller that keeps the list
    /// (emptied after playing it) allocates nothing per frame. A port alone on the bridge and
    /// in step with the output passes its frame through as it is.
    public mutating func write(_ id: BridgePortID, _ frame: [Int16], into outputs: inout [Output]) {
        guard !frame.isEmpty, let index = ports.index(forKey: id) else { return }
        let port = ports.values[index]
        if ports.count == 1, port.mode == .active, pending.isEmpty, (port.playbackCursor ?? flushed) == flushed {
            // Nothing to sum with and nothing waiting: the mix is the frame.
            ports.values[index].playbackCursor = flushed + frame.count
            flushed += frame.count
            outputs.append(.play(frame))
            return
        }
        add(id, count: frame.count, samples: frame, into: &outputs)
    }

    /// The port's clock skipped `count` samples: its playback cursor moves on without adding
    /// anything. Where no port played, the device is told to fill a skipped stretch instead of
    /// being given silence to queue.
    public mutating func skipPlayback(_ id: BridgePortID, count: Int) -> [Output] {
        var outputs: [Output] = []
        add(id, count: count, samples: nil, into: &outputs)
        return outputs
    }

    private mutating func add(_ id: BridgePortID, count: Int, samples played: [Int16]?, into outputs: inout [Output]) {
        guard count > 0, var port = ports[id] else { return }
        // A held port plays silence: nobody hears it, and the output keeps its pace (a
        // recording stays as long as the call, a device does not run dry).
        let held = port.mode == .held && played != nil
        // Audio that comes after its place was written joins the timeline where it stands; a
        // skip is not moved (what the others already covered is not skipped twice).
        let start = port.playbackCursor ?? flushed
        let cursor = played == nil ? start : max(start, flushed)
        let end = cursor + count - flushed
        if end > pending.count {
            let more = end - pending.count
            pending.reserveCapacity(end)
            touched.reserveCapacity(end)
            for _ in 0..<more {
                pending.append(0)
                touched.append(false)
            }
        }
        if let samples = played {
            let base = cursor - flushed
            if !held {
                pending.withUnsafeMutableBufferPointer { sums in
                    samples.withUnsafeBufferPointer { frame in
                        for index in 0..<count { sums[base + index] += Int32(frame[index]) }
                    }
                }
            }
            touched.withUnsafeMutableBufferPointer { marks in
                for index in 0..<count { marks[base + index] = true }
            }
        }
        port.playbackCursor = cursor + count
        let conference = port.conference
        ports[id] = port
        if let samples = played, !held, let conference, let index = ports.index(forKey: id) {
            addToMix(index, conference: conference, at: cursor, samples)
        }
        flush(into: &outputs)
    }

    /// Writes out what every live port has added.
    private mutating func flush() -> [Output] {
        var outputs: [Output] = []
        flush(into: &outputs)
        return outputs
    }

    private mutating func flush(into outputs: inout [Output]) {
        // A port behind what was written was already passed over: it is waited for again once
        // it plays (its audio then joins where the timeline stands).
        var ahead = Int.min
        for port in ports.values { if let cursor = port.playbackCursor, cursor >= flushed { ahead = max(ahead, cursor) } }
        guard ahead > flushed else { return }
        // Ports further behind than the lag are not waited for.
        var target = ahead
        for port in ports.values {
            if let cursor = port.playbackCursor, cursor >= flushed, cursor >= ahead - maximumLag { target = min(target, cursor) }
        }
        let count = min(target - flushed, pending.count)
        guard count > 0 else { return }
        var start = 0
        while start < count {
            let playing = touched[start]
            var end = start + 1
            while end < count && touched[end] == playing { end += 1 }
            if playing {
                // The kept buffer, unless an earlier output of this flush still holds it.
                mixed.removeAll(keepingCapacity: true)
                for index in start..<end { mixed.append(Self.saturated(pending[index])) }
                outputs.append(.play(mixed))
            } else {
                outputs.append(.skipped(end - start))
            }
            start = end
        }
        pending.removeFirst(count)
        touched.removeFirst(count)
        flushed += count
    }

    static func saturated(_ value: Int32) -> Int16 {
        Int16(clamping: value)
    }
}
