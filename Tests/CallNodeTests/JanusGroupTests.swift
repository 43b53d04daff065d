@_spi(Simulation) import CallNode
import AudioCodec
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Media
import Signaling
import Testing

/// End-to-end encrypted groups through a real Janus VideoRoom made with `require_e2ee` (Debian's
/// 1.1.2, started privately): the members hear each other, Janus's own recording of what it
/// forwards holds nothing a decoder can hear, and a member who left cannot open what is sent
/// after it left.
extension RealTimeTests {
@Suite(.serialized, .realTimeAlone, .enabled(if: JanusServer.isInstalled, "janus is not installed (scripts/bootstrap installs it)"))
struct JanusGroupTests {
    typealias Fixture = TwoNodeTests.Fixture
    typealias Rooms = JanusRoomCallTests

    /// A Janus recording (`.mjr`): its header and each packet, as Janus wrote them.
    struct Recording {
        let header: [String: Any]
        let packets: [[UInt8]]

        init(path: String) throws {
            let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
            guard bytes.count > 10, String(decoding: bytes[0..<8], as: UTF8.self) == "MJR00002" else { throw TestFailure("\(path) is not an MJR recording") }
            func u16(_ at: Int) -> Int { Int(bytes[at]) << 8 | Int(bytes[at + 1]) }
            let length = u16(8)
            header = (try JSONSerialization.jsonObject(with: Data(bytes[10..<(10 + length)])) as? [String: Any]) ?? [:]
            var packets: [[UInt8]] = [], at = 10 + length
            // Each packet: "MEET", its time (4 bytes), its length (2 bytes), the RTP packet.
            while at + 10 <= bytes.count, String(decoding: bytes[at..<(at + 4)], as: UTF8.self) == "MEET" {
                let size = u16(at + 8)
                guard at + 10 + size <= bytes.count else { break }
                packets.append(Array(bytes[(at + 10)..<(at + 10 + size)]))
                at += 10 + size
            }
            self.packets = packets
        }

        /// Each packet's frame (the payload; of a RED packet, its primary block).
        var frames: [[UInt8]] {
            let red = header["r"] as? Int
            return packets.compactMap { packet -> [UInt8]? in
                guard packet.count > 12 else { return nil }
                var at = 12 + Int(packet[0] & 0x0F) * 4
                if packet[0] & 0x10 != 0 {
                    guard at + 4 <= packet.count else { return nil }
                    at += 4 + (Int(packet[at + 2]) << 8 | Int(packet[at + 3])) * 4
                }
                guard at < packet.count else { return nil }
                var payload = Array(packet[at...])
                if let red, Int(packet[1] & 0x7F) == red {
                    // RED (RFC 2198): 4-byte headers for the redundant blocks, 1 byte for the primary, last.
                    var offset = 0, redundant = 0
                    while offset < payload.count, payload[offset] & 0x80 != 0, offset + 4 <= payload.count {
                        redundant += Int(payload[offset + 2] & 0x03) << 8 | Int(payload[offset + 3])
                        offset += 4
                    }
                    guard offset + 1 + redundant <= payload.count else { return nil }
                    payload = Array(payload[(offset + 1 + redundant)...])
                }
                return payload
            }
        }
    }

    /// The Opus packets of an Ogg Opus file (what `janus-pp-rec` makes of a recording), less
    /// its two header packets.
    static func oggOpusPackets(path: String) throws -> [[UInt8]] {
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        var packets: [[UInt8]] = [], partial: [UInt8] = [], at = 0
        while at + 27 <= bytes.count, bytes[at..<(at + 4)].elementsEqual("OggS".utf8) {
            let count = Int(bytes[at + 26])
            guard at + 27 + count <= bytes.count else { break }
            let lacing = bytes[(at + 27)..<(at + 27 + count)]
            var body = at + 27 + count
            for size in lacing {
                guard body + Int(size) <= bytes.count else { break }
                partial += bytes[body..<(body + Int(size))]
                body += Int(size)
                // A segment shorter than 255 bytes ends its packet.
                if size < 255 {
                    packets.append(partial)
                    partial = []
                }
            }
            at = body
        }
        return Array(packets.dropFirst(2))
    }

    /// Decodes frames (opened with `key` first, if given; a frame that does not open is left
    /// out) into 48 kHz audio; how many opened.
    static func decode(_ frames: [[UInt8]], key: FrameEncryptionKey?) throws -> (samples: [Int16], opened: Int) {
        let decoder = try OpusDecoder()
        let cipher = key.map { FrameCipher(keys: FrameKeys(outbound: .random(), inbound: $0)) }
        var samples: [Int16] = [], pcm = [Int16](repeating: 0, count: 5_760), opened = 0
        for frame in frames {
            var payload = frame
            if let cipher {
                guard let plain = cipher.open(frame) else { continue }
                payload = plain
                opened += 1
            }
            guard let count = try? decoder.decode(payload, into: &pcm) else { continue }
            samples += pcm.prefix(count)
        }
        return (samples, opened)
    }

    static func tone(_ frequency: Double, in samples: [Int16]) -> Double {
        guard samples.count >= 4_800 else { return 0 }
        return Goertzel.share(of: frequency, in: samples)
    }

    /// Three nodes in a `require_e2ee` VideoRoom: each hears the other two and all show one
    /// security code; Janus's recording of a's stream will not convert (`janus-pp-rec` refuses
    /// an end-to-end encrypted recording) and decodes to no tone; with a's key it does. c
    /// leaves: a and b make new keys and still hear each other, and c's copy of a's key opens
    /// none of the frames a sent after that.
    @Test func threeNodesInAnEncryptedRoomHearEachOtherAndJanusHoldsNothingItCanHear() async throws {
        let f = try Fixture()
        let server = try JanusServer(directory: f.path("janus"), port: FreePort.udpAndTCP(), rooms: [], encryptedRooms: [5200])
        try await server.start()
        defer { server.stop() }
        let room = try #require(JanusRoomAddress("janus:\(server.url)#e2ee:5200"))
        var members: [(name: String, node: CallNode, call: UUID, events: AsyncStream<NodeEvent>, secured: AsyncStream<NodeEvent>)] = []
        var ids: [String: String] = [:]
        for (name, frequency) in Rooms.voices.sorted(by: { $0.key < $1.key }) {
            let node = try await f.node(name, input: .tone(frequency), output: .wav(f.path("\(name)-out.wav")), maximumCalls: 4,
                                        iceAddresses: [server.mediaAddress])
            let events = node.events(), joined = node.events(), secured = node.events()
            let call = try await node.call(.janus(room))
            try await Rooms.connected(events, call, janus: server)
            guard case let .room(_, .joined(_, me, _)) = try await TwoNodeTests.next(joined, within: .seconds(10), where: {
                if case .room(call, .joined) = $0 { true } else { false }
            }) else { throw TestFailure("\(name) did not join") }
            ids[name] = me
            members.append((name, node, call, events, secured))
        }
        // Every member ends up with both feeds and one code for the three of them.
        var codes: [String] = []
        for member in members {
            guard case let .room(_, .groupSecured(code, _)) = try await TwoNodeTests.next(member.secured, within: .seconds(15), where: {
                if case .room(member.call, .groupSecured(_, 3)) = $0 { true } else { false }
            }) else { throw TestFailure("\(member.name) never saw a group of three") }
            codes.append(code)
        }
        #expect(Set(codes).count == 1, "the members see different codes: \(codes)")
        for member in members {
            var keys = await member.node.groupKeys(member.call)?.members.count ?? 0
            for _ in 0..<100 where keys < 2 {
                try await Task.sleep(for: .milliseconds(100))
                keys = await member.node.groupKeys(member.call)?.members.count ?? 0
            }
            #expect(keys == 2, "\(member.name) holds \(keys) of the others' keys")
        }
        try await Task.sleep(for: .seconds(3))
        for member in members {
            let others = Set(Rooms.voices.keys).subtracting([member.name])
            let blocks = try Rooms.lastBlocks(f, member.name)
            #expect(blocks.filter { $0 != others }.count <= 2, "\(member.name) should hear \(others.sorted()), heard \(blocks.map { $0.sorted() })")
        }
        // What c holds of a's key before it leaves; then it leaves, and a and b go on.
        let a = members[0], b = members[1], c = members[2]
        let cCopyOfA = try #require(await c.node.groupKeys(c.call)?.members[a.node.identity.fingerprint])
        let firstKeyOfA = try #require(await a.node.groupKeys(a.call)?.own)
        #expect(cCopyOfA == firstKeyOfA)
        try await c.node.hangUp(c.call)
        guard case .room(_, .groupSecured(_, 2)) = try await TwoNodeTests.next(a.secured, within: .seconds(15), where: {
            if case .room(a.call, .groupSecured(_, 2)) = $0 { true } else { false }
        }) else { throw TestFailure("a never saw c leave") }
        var newKeyOfA = try #require(await a.node.groupKeys(a.call)?.own)
        #expect(newKeyOfA != firstKeyOfA, "a kept its key after c left")
        // b takes a's new key; then a seals with it.
        for _ in 0..<100 where await b.node.groupKeys(b.call)?.members[a.node.identity.fingerprint] != newKeyOfA {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(await b.node.groupKeys(b.call)?.members[a.node.identity.fingerprint] == newKeyOfA)
        try await Task.sleep(for: .seconds(3))
        newKeyOfA = try #require(await a.node.groupKeys(a.call)?.own)
        for (member, other) in [(a, b), (b, a)] {
            let blocks = try Rooms.lastBlocks(f, member.name, voices: { Rooms.voices(in: $0).intersection([other.name, "c"]) })
            #expect(blocks.filter { $0 != [other.name] }.count <= 2, "\(member.name) should hear \(other.name) alone after c left, heard \(blocks.map { $0.sorted() })")
        }
        for member in [a, b] { try await member.node.hangUp(member.call) }
        for member in members { await member.node.shutdown() }
        server.stop()

        // Janus's recording of a's stream.
        let id = try #require(ids["a"])
        let files = try FileManager.default.contentsOfDirectory(atPath: server.recordingDirectory)
        let file = try #require(files.first { $0.hasPrefix("videoroom-5200-user-\(id)-") && $0.hasSuffix("-audio-0.mjr") },
                                "no recording of a in \(files)")
        let path = server.recordingDirectory + "/" + file
        let recording = try Recording(path: path)
        let frequency = try #require(Rooms.voices["a"])
        let converted = f.path("a.opus"), log = f.path("pp-rec.log")
        let status = try ChildProcess.run("/usr/bin/janus-pp-rec", [path, converted], output: log)
        let said = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        var convertedTone: Double?
        if recording.header["e"] as? Bool == true {
            // A recording Janus marked end-to-end encrypted is not converted at all.
            #expect(status != 0 && said.contains("End-to-end encrypted"), "janus-pp-rec converted an encrypted recording (exit \(status)): \(said.suffix(300))")
        } else {
            // Janus 1.1.2 makes a publisher's recorder before it takes the offer's "e2ee" and
            // does not mark it: janus-pp-rec converts it, and what it made holds no voice.
            #expect(status == 0, "janus-pp-rec failed (exit \(status)): \(said.suffix(300))")
            let packets = try Self.oggOpusPackets(path: converted)
            #expect(packets.count > 300, "janus-pp-rec's file holds \(packets.count) packets")
            let decoded = try Self.decode(packets, key: nil)
            convertedTone = Self.tone(frequency, in: decoded.samples)
            #expect(convertedTone ?? 1 < 0.05, "a's tone is audible in what janus-pp-rec made of Janus's recording")
        }
        let frames = recording.frames
        #expect(frames.count > 300, "a's recording holds \(frames.count) frames")
        let asIs = try Self.decode(frames, key: nil)
        // Opus decodes the sealed frames (as noise): the search for the tone had audio to search.
        #expect(asIs.samples.count >= 48_000, "only \(asIs.samples.count / 48) ms of a's recording decoded as it is")
        #expect(Self.tone(frequency, in: asIs.samples) < 0.05, "a's tone is audible in Janus's recording as it is")
        // With a's keys the same frames are a's tone: the first key opens only what came
        // before c left (c's copy of it, the same), the new one what came after.
        let before = try Self.decode(frames, key: cCopyOfA), after = try Self.decode(frames, key: newKeyOfA)
        #expect(Self.tone(frequency, in: before.samples) > 0.5, "c's copy of a's first key does not make a's tone of the recording")
        #expect(Self.tone(frequency, in: after.samples) > 0.5, "a's new key does not make a's tone of the recording")
        let firstNew = frames.firstIndex { FrameCipher(keys: FrameKeys(outbound: .random(), inbound: newKeyOfA)).open($0) != nil }
        let lastOld = frames.lastIndex { FrameCipher(keys: FrameKeys(outbound: .random(), inbound: cCopyOfA)).open($0) != nil }
        let (n, o) = (try #require(firstNew), try #require(lastOld))
        #expect(o < n, "c's copy of a's key opened frame \(o), sent after a's new key's first frame \(n)")
        #expect(after.opened > 100, "only \(after.opened) frames after c left")
        print("e2ee room: code \(codes[0]); a's recording \(frames.count) frames, \(before.opened) opened with the first key (c's copy), "
              + "\(after.opened) with the new one; as recorded (\(asIs.samples.count / 48) ms decoded), a's tone is \(String(format: "%.3f", Self.tone(frequency, in: asIs.samples))) of the audio"
              + (convertedTone.map { ", converted by janus-pp-rec \(String(format: "%.3f", $0))" } ?? ", janus-pp-rec refused it"))
    }

    /// A VideoRoom that takes one publisher: a second node's join ends failed with "full", and
    /// the first stays in the room.
    @Test func aNodeJoiningAFullRoomIsToldSoAndTheRoomGoesOn() async throws {
        let f = try Fixture()
        let server = try JanusServer(directory: f.path("janus"), port: FreePort.udpAndTCP(), rooms: [], videoRooms: [5300], publishers: [5300: 1])
        try await server.start()
        defer { server.stop() }
        let room = try #require(JanusRoomAddress("janus:\(server.url)#videoroom:5300"))
        let a = try await f.node("a", input: .tone(440), maximumCalls: 4, iceAddresses: [server.mediaAddress])
        let b = try await f.node("b", input: .tone(620), maximumCalls: 4, iceAddresses: [server.mediaAddress])
        let aEvents = a.events(), bEvents = b.events()
        let aCall = try await a.call(.janus(room))
        try await Rooms.connected(aEvents, aCall, janus: server)
        let bCall = try await b.call(.janus(room))
        let (reason, detail) = try await Rooms.ended(bEvents, bCall)
        #expect(reason == .failed)
        #expect(detail?.contains("room 5300 is full") == true, "\(detail ?? "no reason")")
        #expect(a.manager.observer.calls.first { $0.id == aCall }.map { $0.hasConnected && !$0.hasEnded } == true, "a's call did not stay in the room")
        try await a.hangUp(aCall)
        await a.shutdown()
        await b.shutdown()
    }

    /// A node that does not listen for calls cannot take its members' keys: joining an
    /// encrypted room says so, and places no call.
    @Test func aNodeThatDoesNotListenCannotJoinAnEncryptedRoom() async throws {
        let f = try Fixture()
        var configuration = CallNodeConfiguration(home: f.path("x"))
        configuration.listenAddress = nil
        configuration.audio = NodeAudioBackend(input: .silence, output: .null)
        let node = try await CallNode(configuration: configuration)
        await node.start()
        let room = try #require(JanusRoomAddress("janus:http://127.0.0.1:9/janus#e2ee:5200"))
        do {
            _ = try await node.call(.janus(room))
            Issue.record("the node joined an encrypted room it cannot take keys for")
        } catch {
            #expect("\(error)".contains("needs this node to listen for calls"), "\(error)")
        }
        #expect(node.manager.observer.calls.isEmpty)
        await node.shutdown()
    }
}
}
