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
/// - **Conferences**: what a member plays also waits in its own short queue; the
///   conference's mix is formed from every member's queue by the first member to read in a
///   period (one frame per period however the ticks are ordered), and each member hears the
///   mix less its own part. A member whose ticks come late is missing from the
///   frames formed while it was away and is heard again, its queue's frames in order, once it
///   plays; a member that reads late reads the frames it missed from the kept mix. So nobody
///   waits for anybody.
///
/// The anchors are PJSIP's conference bridge and baresip's `aumix` (a buffer per source, read
/// once per period into the mix). Plain value, no locking:
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
        /// Where the port next hears its conference, on the mix's timeline (nil until it first
        /// hears the others).
        var mixCursor: Int?
        /// How much the port has read while in the conference (see ``ConferenceMix/front``).
        var conferenceReads: Int?
        /// What the port played that the conference's mix has not taken yet, oldest first.
        var queued = PlayedQueue()
        /// The fewest samples left queued after the mix took its part, over the last
        /// ``AudioBridge/queueWindow`` times it did: a queue that never runs down holds
        /// latency nobody needs.
        var queueLow = Int.max
        var queueTakes = 0
        /// What the port added to its conference's mix, sample for sample with the mix's sums
        /// (from the mix's start; none past its end): taken back out of what it hears, so it
        /// never hears itself whatever the order of its operations.
        var own: [Int32] = []

        mutating func leftConference() {
            conference = nil
            resetHearing()
            own.removeAll(keepingCapacity: true)
        }

        /// Forgets where it heard the conference and what it had queued for it. (What it added
        /// to the mix stays recorded while it is a member: it may still read there.)
        mutating func resetHearing() {
            mixCursor = nil
            conferenceReads = nil
            queued.removeAll()
            queueLow = Int.max
            queueTakes = 0
        }
    }

    /// A conference's mix: what every active member had queued, summed as the members read,
    /// for [start, start + sums.count) of its own timeline. A member hears the mix less its
    /// own part: one sum per sample however many members (a buffer per pair of
    /// members grew with the square of the conference).
    struct ConferenceMix: Sendable {
        var start = 0
        var sums: [Int32] = []
        var end: Int { start + sums.count }
        /// The most any member has read since it joined (members count from the front when
        /// they join): the mix is formed to here (its end), whatever order the members tick in.
        var front = 0
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

    /// How far behind the others a conference member may fall (its ticks late) and still hear
    /// all it missed once its ticks run back to back; further behind, it hears the newest again.
    /// Four lags (240 ms by default): the mix is kept that long; nobody on time hears later.
    var catchUpWindow: Int { 4 * maximumLag }

    /// How many times the mix takes from a member's queue before a queue that never ran below
    /// a frame gives a frame up (once a second with 20 ms frames).
    static let queueWindow = 25

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
        port.resetHearing()
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
            ports[id]?.mixCursor = nil
            ports[id]?.conferenceReads = nil
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
        ports.values[index].leftConference()
        let rest = ports.filter { $0.value.conference == conference }.map(\.key)
        if rest.count == 1 { ports[rest[0]]?.leftConference() }
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
    /// wide and saturated once: the port's next stretch of the mix, formed from the members'
    /// queues by the first member to read in each period. A port that read late reads what it
    /// missed; one further behind than ``catchUpWindow`` starts again at the newest frame.
    private mutating func hearConference(_ index: Dictionary<BridgePortID, Port>.Index, into frame: inout [Int16]) {
        guard let conference = ports.values[index].conference else { return }
        let count = frame.count
        var mix = mixes[conference] ?? ConferenceMix()
        mixes[conference] = nil  // held here while it changes: no second reference to copy
        defer { mixes[conference] = mix }
        // How much this member has read in the conference. One in step with the others moves
        // the front and forms that much more of the mix; one catching up (its ticks came late
        // and now run back to back) reads what was formed while it was away. A member reading
        // more often than the others (late from its first read, or further behind than the
        // window) gets at most a frame ahead of them: it cannot run the mix ahead of time and
        // empty their queues.
        var reads = ports.values[index].conferenceReads ?? (mix.front - count)
        if reads < mix.front - catchUpWindow { reads = mix.front - count }
        reads += count
        ports.values[index].conferenceReads = reads
        if reads > mix.front {
            form(&mix, conference: conference, count: reads - mix.front)
            mix.front = reads
        }
        let newest = max(mix.start, mix.end - count)
        var cursor = ports.values[index].mixCursor ?? newest
        if cursor < mix.start || cursor < mix.end - catchUpWindow { cursor = newest }
        let available = min(count, mix.end - cursor)
        guard available > 0 else { return }
        if sums.count != count { sums = [Int32](repeating: 0, count: count) }
        sums.withUnsafeMutableBufferPointer { wide in
            frame.withUnsafeBufferPointer { microphone in
                mix.sums.withUnsafeBufferPointer { all in
                    for sample in 0..<available { wide[sample] = Int32(microphone[sample]) + all[cursor - mix.start + sample] }
                }
                for sample in available..<count { wide[sample] = Int32(microphone[sample]) }
            }
            ports.values[index].own.withUnsafeBufferPointer { mine in
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
        trimMix(&mix, conference: conference)
    }

    /// The mix's next `count` samples: what each active member has queued, up to `count` of
    /// it (a member with less queued, its ticks late, is missing from the rest), recorded as
    /// its own part too.
    private mutating func form(_ mix: inout ConferenceMix, conference: Int, count: Int) {
        let base = mix.sums.count
        mix.sums.append(contentsOf: repeatElement(0, count: count))
        for index in memberIndices(conference) {
            // Its own part stays aligned with the mix (a member that joined late has none).
            let missing = base + count - ports.values[index].own.count
            if missing > 0 { ports.values[index].own.append(contentsOf: repeatElement(0, count: missing)) }
            let queuedCount = ports.values[index].queued.count
            guard queuedCount > 0 else { continue }
            let taken = ports.values[index].mode == .active ? min(count, queuedCount) : 0
            var queue = ports.values[index].queued  // only its place changes: no copy
            ports.values[index].own.withUnsafeMutableBufferPointer { mine in
                mix.sums.withUnsafeMutableBufferPointer { all in
                    queue.take(taken) { played, at in
                        for sample in 0..<played.count {
                            let value = Int32(played[sample])
                            all[base + at + sample] += value
                            mine[base + at + sample] = value
                        }
                    }
                }
            }
            ports.values[index].queued = queue
            // A queue that never ran down to less than a frame in the window gives one up: its
            // member is heard a frame sooner from then on.
            ports.values[index].queueLow = min(ports.values[index].queueLow, queuedCount - taken)
            ports.values[index].queueTakes += 1
            if ports.values[index].queueTakes >= Self.queueWindow {
                if ports.values[index].queueLow >= count { ports.values[index].queued.drop(count) }
                ports.values[index].queueLow = Int.max
                ports.values[index].queueTakes = 0
            }
        }
    }

    /// Queues what a conference member played for the mix, keeping no more than the lag (the
    /// oldest goes: a member whose ticks ran back to back is not heard later from then on).
    private mutating func enqueue(_ index: Dictionary<BridgePortID, Port>.Index, _ samples: [Int16]) {
        ports.values[index].queued.append(samples, keeping: 2 * maximumLag)
    }

    /// Lets go of the stretch of a conference's mix that is further back than any member may
    /// still read. Constant work per read, whatever the conference's size: no member's cursor
    /// is looked at (keeping the window a little longer than every member needs costs a few
    /// kilobytes, and a walk over the members on every read cost the square of the
    /// conference per period).
    private mutating func trimMix(_ mix: inout ConferenceMix, conference: Int) {
        // A member reads no further back than the catch-up window behind the newest.
        let drop = mix.sums.count - catchUpWindow
        // In steps at least as long as what is kept: each drop moves what is kept, so that is
        // at most one sample moved per sample formed.
        guard drop >= max(4_800, catchUpWindow) else { return }
        Self.dropFirst(drop, of: &mix.sums)
        mix.start += drop
        // The members' own parts stay aligned with it.
        for index in memberIndices(conference) {
            Self.dropFirst(drop, of: &ports.values[index].own)
        }
    }

    /// Where the conference's members are in `ports`. Collected first: iterating
    /// `ports.indices` holds the dictionary's storage, and a change to a port while it is held
    /// copies the storage and then each array the port changes.
    private func memberIndices(_ conference: Int) -> [Dictionary<BridgePortID, Port>.Index] {
        var indices: [Dictionary<BridgePortID, Port>.Index] = []
        var index = ports.startIndex
        while index != ports.endIndex {
            if ports.values[index].conference == conference { indices.append(index) }
            ports.formIndex(after: &index)
        }
        return indices
    }

    /// Removes the first `count` values (or all there are) keeping the array's storage, so the
    /// appends that follow do not allocate again.
    private static func dropFirst(_ count: Int, of values: inout [Int32]) {
        let count = min(count, values.count)
        guard count > 0 else { return }
        let kept = values.count - count
        values.withUnsafeMutableBufferPointer { all in
            if kept > 0 { all.baseAddress!.update(from: all.baseAddress! + count, count: kept) }  // overlapping: memmove
        }
        values.removeLast(count)
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
        port.mixCursor = nil  // it hears the conference again from its newest frame
        port.conferenceReads = port.conferenceReads.map { $0 + count }  // the time went by
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
        // Through the port's index, never a copy of it: a copy would share its queue, and the
        // queue's next append would copy it whole.
        guard count > 0, let index = ports.index(forKey: id) else { return }
        // A held port plays silence: nobody hears it, and the output keeps its pace (a
        // recording stays as long as the call, a device does not run dry).
        let held = ports.values[index].mode == .held && played != nil
        // Audio that comes after its place was written joins the timeline where it stands; a
        // skip is not moved (what the others already covered is not skipped twice).
        let start = ports.values[index].playbackCursor ?? flushed
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
                        for sample in 0..<count { sums[base + sample] += Int32(frame[sample]) }
                    }
                }
            }
            touched.withUnsafeMutableBufferPointer { marks in
                for sample in 0..<count { marks[base + sample] = true }
            }
        }
        ports.values[index].playbackCursor = cursor + count
        if let samples = played, !held, ports.values[index].conference != nil {
            enqueue(index, samples)
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
