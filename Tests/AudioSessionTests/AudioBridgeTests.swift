import AudioSession
import CallNodeTestKit
import CallNodeTestSupport
import Clocks
import Media
import Testing

/// The session's audio bridge: the microphone copied to every call, their playback summed.
@Suite struct AudioBridgeTests {
    /// A microphone that counts up: sample n of the capture is n (mod 30 000), so a frame
    /// says exactly which stretch of the capture it is.
    final class CountingMicrophone {
        var next = 0
        var reads = 0
        func read(_ frame: inout [Int16]) {
            reads += 1
            for index in frame.indices {
                frame[index] = Int16(next % 30_000)
                next += 1
            }
        }
    }

    static func frame(_ value: Int16, count: Int = 960) -> [Int16] { [Int16](repeating: value, count: count) }

    static func played(_ outputs: [AudioBridge.Output]) -> [Int16] {
        outputs.flatMap { output -> [Int16] in
            if case let .play(samples) = output { return samples }
            return []
        }
    }

    @Test func everyCallHearsTheWholeMicrophoneNotAlternateFrames() {
        var bridge = AudioBridge()
        let mic = CountingMicrophone()
        let a = bridge.addPort(), b = bridge.addPort()
        var heardByA: [Int16] = [], heardByB: [Int16] = []
        for period in 0..<50 {
            // Ticks come in either order within a period (a real-time clock ticks calls concurrently).
            let order = period % 3 == 0 ? [b, a] : [a, b]
            for port in order {
                let frame = bridge.read(port, count: 960) { mic.read(&$0) }
                if port == a { heardByA += frame } else { heardByB += frame }
            }
        }
        // One device read per period, each call got every sample in order (B joined one frame
        // behind A in the first period, or A behind B: either is a continuous stretch).
        #expect(mic.reads <= 51)
        for heard in [heardByA, heardByB] {
            let start = Int(heard[0])
            #expect(heard.enumerated().allSatisfy { Int($0.element) == ($0.offset + start) % 30_000 })
            #expect(start == 0 || start == 960)
        }
    }

    @Test func aLoneCallReadsAndPlaysWithNoAddedDelay() {
        var bridge = AudioBridge()
        let mic = CountingMicrophone()
        let a = bridge.addPort()
        let first = bridge.read(a, count: 960) { mic.read(&$0) }
        #expect(first.first == 0 && first.last == 959)
        let out = bridge.write(a, Self.frame(700))
        #expect(out == [.play(Self.frame(700))])
    }

    @Test func twoCallsArePlayedSummedWithSaturationAsLongAsTheWallTime() {
        var bridge = AudioBridge()
        let a = bridge.addPort(), b = bridge.addPort()
        var device: [Int16] = []
        for period in 0..<100 {
            let order = period % 2 == 0 ? [a, b] : [b, a]
            for port in order {
                device += Self.played(bridge.write(port, Self.frame(port == a ? 1_000 : 20_000)))
            }
        }
        // 100 periods of two calls: 100 frames of output, not 200 interleaved.
        // (A's first frame went out alone: B had not played yet.)
        #expect(device.count == 100 * 960)
        #expect(device.prefix(960).allSatisfy { $0 == 1_000 })
        #expect(device.dropFirst(960).allSatisfy { $0 == 21_000 })
        // Saturation, not wrap-around.
        var loud = AudioBridge()
        let x = loud.addPort(), y = loud.addPort()
        _ = loud.write(x, Self.frame(30_000))
        _ = loud.write(y, Self.frame(30_000))
        #expect(Self.played(loud.write(x, Self.frame(30_000))).allSatisfy { $0 == 32_767 })
        _ = loud.write(y, Self.frame(-30_000))
        let negative = Self.played(loud.write(x, Self.frame(-30_000)))
        #expect(negative.count == 960 && negative.allSatisfy { $0 == -32_768 })
    }

    @Test func aCallThatStopsPlayingIsNotWaitedForBeyondTheLag() {
        var bridge = AudioBridge(maximumLag: 2_880)
        let a = bridge.addPort(), b = bridge.addPort()
        var device = Self.played(bridge.write(a, Self.frame(1)))  // alone so far: played at once
        device += Self.played(bridge.write(b, Self.frame(2)))     // waits for A's next frame
        #expect(device == Self.frame(1))
        // B goes quiet (its media stalled without telling the bridge): A is held back three
        // frames at most, then plays on alone.
        var afterEachWrite: [Int] = []
        for _ in 0..<10 {
            device += Self.played(bridge.write(a, Self.frame(1)))
            afterEachWrite.append(device.count)
        }
        #expect(afterEachWrite == [2, 2, 2, 2, 6, 7, 8, 9, 10, 11].map { $0 * 960 })
        #expect(device[960..<1_920].allSatisfy { $0 == 3 })
        #expect(device[1_920...].allSatisfy { $0 == 1 })
        // B comes back: mixed in where the timeline stands.
        #expect(Self.played(bridge.write(b, Self.frame(2))).count == 0)
        #expect(Self.played(bridge.write(a, Self.frame(1))) == Self.frame(3))
        // A stopped sink is not waited for at all.
        bridge.pause(b, capture: false)
        #expect(Self.played(bridge.write(a, Self.frame(1))) == Self.frame(1))
    }

    @Test func aHeldCallHearsNothingAndIsNotHeard() {
        var bridge = AudioBridge()
        let mic = CountingMicrophone()
        let a = bridge.addPort(), b = bridge.addPort()
        _ = bridge.setMode(.held, of: b)
        #expect(bridge.mode(of: b) == .held)
        var device: [Int16] = []
        for _ in 0..<5 {
            let heardByA = bridge.read(a, count: 960) { mic.read(&$0) }
            let heardByB = bridge.read(b, count: 960) { mic.read(&$0) }
            #expect(heardByA.contains { $0 != 0 })
            #expect(heardByB.allSatisfy { $0 == 0 })
            device += Self.played(bridge.write(a, Self.frame(100)))
            device += Self.played(bridge.write(b, Self.frame(5_000)))
        }
        // The held call is not heard (it plays silence, keeping its place on the output).
        #expect(device == Self.frame(100, count: 5 * 960))
        // Resumed: heard again, and it hears the newest microphone audio.
        _ = bridge.setMode(.active, of: b)
        let before = mic.next
        let heard = bridge.read(b, count: 960) { mic.read(&$0) }
        #expect(Int(heard[0]) >= before - 960)
        #expect(Self.played(bridge.write(b, Self.frame(5_000))).count == 0)
        // (B kept its place on the output while held, a frame ahead of A: its first frame
        // after the resume plays with A's next.)
        #expect(Self.played(bridge.write(a, Self.frame(100))) == Self.frame(100))
        #expect(Self.played(bridge.write(a, Self.frame(100))) == Self.frame(5_100))
    }

    @Test func aConferenceMemberHearsTheMicrophoneAndEveryOtherMemberButNotItself() {
        var bridge = AudioBridge()
        let silentMic: (inout [Int16]) -> Void = { frame in for i in frame.indices { frame[i] = 10 } }
        let a = bridge.addPort(), b = bridge.addPort(), c = bridge.addPort()
        bridge.join([a, b])
        bridge.join([b, c])
        #expect(bridge.conference(of: c) == [a, b, c])
        var heard: [BridgePortID: [Int16]] = [:]
        var device: [Int16] = []
        let voice: [BridgePortID: Int16] = [a: 1_000, b: 200, c: 30]
        for _ in 0..<20 {
            for port in [a, b, c] {
                heard[port, default: []] += bridge.read(port, count: 960, device: silentMic)
                device += Self.played(bridge.write(port, Self.frame(voice[port]!)))
            }
        }
        // Once the conference runs (after the first period), each remote party hears the local
        // microphone (10) plus the other two parties, never itself.
        #expect(heard[a]!.suffix(960 * 10).allSatisfy { $0 == 10 + 200 + 30 })
        #expect(heard[b]!.suffix(960 * 10).allSatisfy { $0 == 10 + 1_000 + 30 })
        #expect(heard[c]!.suffix(960 * 10).allSatisfy { $0 == 10 + 1_000 + 200 })
        // The local speaker plays all three, once (A's first frame went out before the others
        // had played anything).
        #expect(device.count == 20 * 960)
        #expect(device.prefix(960).allSatisfy { $0 == 1_000 })
        #expect(device.dropFirst(960).allSatisfy { $0 == 1_230 })
        // Leaving: C hears only the microphone again; A and B still hear each other.
        bridge.leaveConference(c)
        for port in [a, b, c] { _ = bridge.write(port, Self.frame(voice[port]!)) }
        #expect(bridge.read(c, count: 960, device: silentMic).allSatisfy { $0 == 10 })
        #expect(bridge.read(a, count: 960, device: silentMic).allSatisfy { $0 == 10 + 200 })
        // A conference left with one member ends.
        bridge.leaveConference(a)
        #expect(bridge.conference(of: b).isEmpty)
    }

    /// Ticks that come late and then run back to back (a loaded machine): a member whose write
    /// lands after a gap, the timeline having moved on without it, still never hears itself.
    /// Each voice is one bit, so a frame says exactly whose audio it holds. The bridge used to
    /// forget what a member had added before such a gap and sent it back whole frames of its
    /// own voice (a conference's members heard themselves in a loaded full suite).
    /// Thirty seeds one after the other (as thirty parallel cases in debug they kept both of the
    /// suite's pool threads for half a minute).
    @Test func noMemberHearsItselfWhenItsTicksComeLate() {
        for seed in 0..<30 {
            let (problems, heardOthers) = Self.conferenceWithLateTicks(seed: seed)
            #expect(problems.isEmpty, "seed \(seed): \(problems.count) frames held the member's own voice: \(problems.prefix(5))")
            // Nobody waits for a late member, and a late member hears what it missed: members
            // hear one another in 894–897, 863–897 and 802–889 of the 900 frames with one tick
            // in 100, 20 and 6 late (they used to in 802–866, 576–674 and 327–410). What is
            // left: the first period, and frames where both others were late at once.
            let least = [880, 850, 780][seed % 3]
            #expect(heardOthers >= least, "seed \(seed): only \(heardOthers) frames held another member (one tick in \([100, 20, 6][seed % 3]) late)")
            // As the media clock really does it: a member's missed ticks are skipped, not run
            // back to back. It then hears the newest audio, and the others hear a gap where it
            // played nothing: 853–878, 668–781 and 387–488 of the 900 frames (there were
            // fewer than 900 reads; they used to be 795–868, 553–653 and 292–371).
            let (skipProblems, heardSkipping) = Self.conferenceWithLateTicks(seed: seed, skipping: true)
            #expect(skipProblems.isEmpty, "seed \(seed), skipping: \(skipProblems.prefix(5))")
            #expect(heardSkipping >= [840, 650, 380][seed % 3], "seed \(seed), skipping: only \(heardSkipping) frames held another member")
        }
    }

    /// One member speaks, numbering its frames; all three tick late now and then (one tick in
    /// six). The others hear its frames in the order it played them, none twice and none cut
    /// into another: a late member is heard later, never doubled or out of order.
    @Test func aLateMembersVoiceIsHeardInOrderAndNeverTwice() {
        for seed in 0..<6 {
            var (bridge, ports) = Self.threeMembers()
            let count = Self.bitFrame
            let quiet: @Sendable (inout [Int16]) -> Void = { _ in }
            var spoken = 0
            var heard: [[Int16]] = [[], [], []]
            Self.lateTicks(seed: seed, lateness: 6) { member, _, due in
                for _ in 0..<due {
                    let frame = bridge.read(ports[member], count: count, device: quiet)
                    heard[member] += frame.filter { $0 != 0 }
                    if member == 0 {
                        spoken += 1
                        _ = bridge.write(ports[member], Self.frame(Int16(spoken), count: count))
                    } else {
                        _ = bridge.write(ports[member], Self.frame(0, count: count))
                    }
                }
            }
            #expect(heard[0].isEmpty, "seed \(seed): the speaker heard itself")
            for listener in [1, 2] {
                let numbers = heard[listener]
                // In order, whole frames, each at most once.
                #expect(zip(numbers, numbers.dropFirst()).allSatisfy { $0 <= $1 }, "seed \(seed), member \(listener): out of order")
                let frames = Dictionary(grouping: numbers, by: { $0 }).mapValues(\.count)
                #expect(frames.values.allSatisfy { $0 == count }, "seed \(seed), member \(listener): a frame cut or doubled: \(frames.filter { $0.value != count }.prefix(4))")
                // Most of what was said: 209–237 of its 300 frames (the bridge used to pass on
                // 77–107). A late speaker's oldest queued frames give way beyond two lags, so
                // that it is not heard later and later.
                #expect(frames.count * 10 >= spoken * 6, "seed \(seed), member \(listener): heard \(frames.count) of \(spoken) frames")
            }
        }
    }

    /// Frames of 2 ms and a lag of three of them (the bridge counts in samples, and a debug
    /// build sums 20 ms frames slowly); the microphone and each member's voice are one bit of
    /// the sample value each, so a frame says exactly whose audio it holds.
    static let bitFrame = 96
    static let bitMicrophone: @Sendable (inout [Int16]) -> Void = { frame in for i in frame.indices { frame[i] = 1 } }
    static let bitVoices: [Int16] = [8, 64, 512]

    /// A bridge with three ports joined in one conference.
    static func threeMembers() -> (AudioBridge, [BridgePortID]) {
        var bridge = AudioBridge(maximumLag: 3 * bitFrame)
        let ports = [bridge.addPort(), bridge.addPort(), bridge.addPort()]
        bridge.join(ports)
        return (bridge, ports)
    }

    /// Three members' ticks over 300 periods, in shuffled order each period: one tick in
    /// `lateness` of a member comes late, the member missing 0–5 more periods. `tick(member,
    /// period, due)` runs a member when it comes, with the ticks due by then (1 when on time).
    static func lateTicks(seed: Int, lateness: Int, _ tick: (_ member: Int, _ period: Int, _ due: Int) -> Void) {
        var rng = SplitMix64(seed: UInt64(seed))
        var due = [0, 0, 0], waiting = [0, 0, 0]
        for period in 0..<300 {
            for member in [0, 1, 2].shuffled(using: &rng) {
                due[member] += 1
                if waiting[member] > 0 {
                    waiting[member] -= 1
                    continue
                }
                if Int.random(in: 0..<lateness, using: &rng) == 0 {
                    waiting[member] = Int.random(in: 0...5, using: &rng)
                    continue
                }
                tick(member, period, due[member])
                due[member] = 0
            }
        }
    }

    /// Three members, 300 periods of ticks in shuffled order; one in 100, 20 or 6 ticks of a
    /// member comes one to six frames late, and its ticks then run back to back (or, `skipping`,
    /// the missed ones are skipped as the media clock skips them). Each voice is
    /// one bit of the sample value, the microphone another. Frames of 2 ms and a lag of three of
    /// them: the bridge counts in samples, and a debug build sums 20 ms frames slowly.
    static func conferenceWithLateTicks(seed: Int, skipping: Bool = false) -> (problems: [String], heardOthers: Int) {
        var (bridge, ports) = Self.threeMembers()
        let (count, microphone, voices) = (Self.bitFrame, Self.bitMicrophone, Self.bitVoices)
        var heardOthers = 0
        var problems: [String] = []
        Self.lateTicks(seed: seed, lateness: [100, 20, 6][seed % 3]) { member, period, due in
            let voice = voices[member]
            var ticks = due
            if skipping, due > 1 {
                // As the media clock does: the ticks missed are skipped, not run.
                bridge.skipCapture(ports[member], count: (due - 1) * count) { _ in }
                _ = bridge.skipPlayback(ports[member], count: (due - 1) * count)
                ticks = 1
            }
            for _ in 0..<ticks {
                let heard = bridge.read(ports[member], count: count, device: microphone)
                var own = 0, others = false
                for sample in heard {
                    if sample & voice != 0 { own += 1 }
                    if sample > 1 { others = true }
                }
                if own > 0 { problems.append("period \(period), member \(member): \(own) samples") }
                if others { heardOthers += 1 }
                _ = bridge.write(ports[member], Self.frame(voice, count: count))
            }
        }
        return (problems, heardOthers)
    }

    /// Three members doing what media does in any order: a tick's read and write, a read or a
    /// write alone, two writes (the first frame played as it arrived), skips of up to six
    /// frames (the process was paused), a stop of capture or playback, a hold or resume. A
    /// frame holding the member's own voice (or a negative copy of it, its part taken out where
    /// it had not added it) is a problem.
    static func conferenceUnderRandomOperations(seed: Int, steps: Int = 3_000) -> [String] {
        var rng = SplitMix64(seed: UInt64(seed))
        var (bridge, ports) = Self.threeMembers()
        let (count, microphone, voices) = (Self.bitFrame, Self.bitMicrophone, Self.bitVoices)
        var problems: [String] = []
        for step in 0..<steps {
            let member = Int.random(in: 0..<3, using: &rng)
            let voice = voices[member]
            let op = Int.random(in: 0..<100, using: &rng)
            func read(_ what: String) {
                let heard = bridge.read(ports[member], count: count, device: microphone)
                let own = heard.filter { $0 & voice != 0 || $0 < 0 }.count
                if own > 0 { problems.append("step \(step) \(what), member \(member): \(own) samples \(heard.first!) \(heard.last!)") }
            }
            switch op {
            case 0..<60:
                read("pair"); _ = bridge.write(ports[member], Self.frame(voice, count: count))
            case 60..<70: read("read")
            case 70..<80: _ = bridge.write(ports[member], Self.frame(voice, count: count))
            case 80..<85:
                let frames = Int.random(in: 1...6, using: &rng)
                bridge.skipCapture(ports[member], count: frames * count) { _ in }
                _ = bridge.skipPlayback(ports[member], count: frames * count)
            case 85..<88:
                _ = bridge.pause(ports[member], capture: Bool.random(using: &rng))
            case 88..<90:
                _ = bridge.setMode(Bool.random(using: &rng) ? .held : .active, of: ports[member])
            default:
                read("pair2"); _ = bridge.write(ports[member], Self.frame(voice, count: count))
                _ = bridge.write(ports[member], Self.frame(voice, count: count))
            }
        }
        return problems
    }

    /// Beside the late ticks above: every other order of a member's operations. (Two hundred
    /// seeds found nothing; sixteen run here, each in a quarter of a second in debug.)
    @Test func noMemberHearsItselfWhateverTheOrderOfItsOperations() {
        for seed in 0..<16 {
            let problems = Self.conferenceUnderRandomOperations(seed: seed)
            #expect(problems.isEmpty, "seed \(seed): \(problems.count): \(problems.prefix(4))")
        }
    }

    @Test func aPauseOfTheProcessIsSkippedNotQueuedAsSilence() {
        var bridge = AudioBridge()
        let a = bridge.addPort(), b = bridge.addPort()
        _ = bridge.write(a, Self.frame(1))
        _ = bridge.write(b, Self.frame(2))
        #expect(Self.played(bridge.write(a, Self.frame(1))) == Self.frame(3))
        // Both calls' clocks skipped a second: the device is told once to fill a skipped
        // second, not given two seconds of silence to queue.
        var outputs = bridge.skipPlayback(a, count: 48_000)
        outputs += bridge.skipPlayback(b, count: 48_000)
        #expect(outputs == [.skipped(48_000)] || outputs == [.play(Self.frame(2)), .skipped(47_040)])
        // A microphone skip moves on by as much, once on the device.
        let mic = CountingMicrophone()
        _ = bridge.read(a, count: 960) { mic.read(&$0) }
        _ = bridge.read(b, count: 960) { mic.read(&$0) }
        var skippedOnDevice = 0
        bridge.skipCapture(a, count: 4_800) { skippedOnDevice += $0 }
        bridge.skipCapture(b, count: 4_800) { skippedOnDevice += $0 }
        #expect(skippedOnDevice == 4_800)
        #expect(mic.reads == 1)
    }

    @Test func removingAPortReleasesWhatWaitedForIt() {
        var bridge = AudioBridge()
        let a = bridge.addPort(), b = bridge.addPort()
        _ = bridge.write(b, Self.frame(2))
        _ = bridge.write(a, Self.frame(1))
        #expect(Self.played(bridge.write(a, Self.frame(1))).count == 0)  // waits for B
        #expect(Self.played(bridge.removePort(b)) == Self.frame(1, count: 1_920))
        #expect(bridge.portIDs == [a])
    }

    /// Through a real session: two calls' sources and sinks on one output.
    @Test func twoCallsOnOneSessionShareTheMicrophoneAndTheOutput() async throws {
        let backend = ManualRenderingBackend()
        let session = AudioSessionOwner<AppOwned>(name: "bridge", configuration: AudioSessionConfiguration(),
                                                  backend: backend, clock: TimerClock(ManualClock()))
        try await session.activate()
        let first = try await session.port(), second = try await session.port()
        #expect(first.id != second.id)
        #expect(await session.ports == [first.id, second.id])
        for endpoint in [first, second] {
            try endpoint.source.start()
            try endpoint.sink.start()
        }
        let device = backend.endpoint("manual")
        var heard: [[Int16]] = [[], []]
        for period in 0..<10 {
            device.pushCapture(Self.frame(Int16(100 + period)))
            for (index, endpoint) in [first, second].enumerated() {
                var frame = [Int16](repeating: 0, count: 960)
                _ = endpoint.source.read(into: &frame)
                heard[index] += frame
                endpoint.sink.write(Self.frame(index == 0 ? 1_000 : 2_000))
            }
        }
        // Both calls heard every captured frame (one joined a frame behind at most).
        for calls in heard { #expect(Set(calls.suffix(960 * 8)) == Set((102...109).map { Int16($0) }) || Set(calls.suffix(960 * 8)) == Set((101...108).map { Int16($0) })) }
        // One output frame per period, both calls summed (the first call's first frame went
        // out before the second had played).
        let played = device.pullPlayback(maximum: 100_000)
        #expect(played.count == 10 * 960)
        #expect(played.prefix(960).allSatisfy { $0 == 1_000 })
        #expect(played.dropFirst(960).allSatisfy { $0 == 3_000 })

        // Held: the second call is neither heard nor hears (after the frame it already played).
        await session.setMode(.held, of: second.id)
        #expect(await session.mode(of: second.id) == .held)
        first.sink.write(Self.frame(1_000))
        _ = device.pullPlayback(maximum: 100_000)
        second.sink.write(Self.frame(2_000))
        first.sink.write(Self.frame(1_000))
        #expect(device.pullPlayback(maximum: 100_000) == Self.frame(1_000))
        var frame = [Int16](repeating: 1, count: 960)
        device.pushCapture(Self.frame(500))
        _ = second.source.read(into: &frame)
        #expect(frame.allSatisfy { $0 == 0 })
        for endpoint in [first, second] {
            endpoint.source.stop()
            endpoint.sink.stop()
        }
        try await session.deactivate()
    }
}
