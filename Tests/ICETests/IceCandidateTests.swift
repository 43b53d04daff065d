import ICE
import Testing

@Suite struct IceCandidateTests {
    static let valid = [
        "candidate:1 1 UDP 2130706431 192.0.2.1 5000 typ host",
        "candidate:842163049 1 udp 1677729535 203.0.113.7 61665 typ srflx raddr 10.0.0.2 rport 54321 generation 0 network-cost 999",
        "candidate:3 1 UDP 16777215 198.51.100.9 3478 typ relay raddr 203.0.113.7 rport 61665",
        "candidate:4 1 TCP 1518280447 192.0.2.1 9 typ host tcptype active",
        "candidate:5 1 TCP 1518214911 192.0.2.1 40000 typ host tcptype passive",
        "candidate:6 1 UDP 2122262783 2001:db8::1 55000 typ host",
        "candidate:7 2 UDP 1845501695 192.0.2.44 5001 typ prflx raddr 0.0.0.0 rport 0",
        "candidate:a+b/C 1 UDP 2113937151 4f2a1b9c-5d1e-4c3a-9f0e-0123456789ab.local 51234 typ host generation 0",
    ]

    @Test("every valid attribute parses and prints back to an equal value", arguments: valid)
    func roundTrip(_ text: String) throws {
        let candidate = try IceCandidate(parsing: text)
        let reparsed = try IceCandidate(parsing: candidate.description)
        #expect(reparsed == candidate)
        #expect(try IceCandidate(parsing: "a=" + text + "\r\n") == candidate)
    }

    @Test func fieldsAreRead() throws {
        let c = try IceCandidate(parsing: Self.valid[1])
        #expect(c.foundation == "842163049")
        #expect(c.component == 1)
        #expect(c.transport == .udp)
        #expect(c.priority == 1_677_729_535)
        #expect(c.address == "203.0.113.7")
        #expect(c.port == 61665)
        #expect(c.type == .serverReflexive)
        #expect(c.relatedAddress == "10.0.0.2")
        #expect(c.relatedPort == 54321)
        #expect(c.extensions == [.init(name: "generation", value: "0"), .init(name: "network-cost", value: "999")])
        #expect(c.description == "candidate:842163049 1 UDP 1677729535 203.0.113.7 61665 typ srflx raddr 10.0.0.2 rport 54321 generation 0 network-cost 999")

        let tcp = try IceCandidate(parsing: Self.valid[3])
        #expect(tcp.transport == .tcp && tcp.tcpType == .active)
        #expect(try IceCandidate(parsing: Self.valid[7]).hasIPAddress == false)
        #expect(try IceCandidate(parsing: Self.valid[5]).hasIPAddress)
    }

    @Test("malformed attributes name the field that is wrong", arguments: [
        ("1 1 UDP 1 192.0.2.1 5000 typ host", IceCandidateParseError.missingPrefix("1 1 UDP 1 192.0.2.1 5000 typ host")),
        ("candidate:", .missingField("foundation")),
        ("candidate:1 1 UDP", .missingField("priority")),
        ("candidate:1 1 UDP 1 192.0.2.1 5000", .missingField("'typ'")),
        ("candidate:1 1 UDP 1 192.0.2.1 5000 typ", .missingField("candidate type")),
        ("candidate:f_o 1 UDP 1 192.0.2.1 5000 typ host", .invalidFoundation("f_o")),
        ("candidate:\(String(repeating: "x", count: 33)) 1 UDP 1 192.0.2.1 5000 typ host", .invalidFoundation(String(repeating: "x", count: 33))),
        ("candidate:1 0 UDP 1 192.0.2.1 5000 typ host", .invalidComponent("0")),
        ("candidate:1 1 SCTP 1 192.0.2.1 5000 typ host", .invalidTransport("SCTP")),
        ("candidate:1 1 UDP 4294967296 192.0.2.1 5000 typ host", .invalidPriority("4294967296")),
        ("candidate:1 1 UDP -1 192.0.2.1 5000 typ host", .invalidPriority("-1")),
        ("candidate:1 1 UDP 1 192.0.2.300 5000 typ host", .invalidAddress("192.0.2.300")),
        ("candidate:1 1 UDP 1 bad_host! 5000 typ host", .invalidAddress("bad_host!")),
        ("candidate:1 1 UDP 1 192.0.2.1 65536 typ host", .invalidPort("65536")),
        ("candidate:1 1 UDP 1 192.0.2.1 5000 type host", .invalidType("type")),
        ("candidate:1 1 UDP 1 192.0.2.1 5000 typ relayed", .invalidType("relayed")),
        ("candidate:1 1 UDP 1 192.0.2.1 5000 typ srflx raddr", .invalidExtension("raddr")),
        ("candidate:1 1 UDP 1 192.0.2.1 5000 typ srflx rport x", .invalidPort("x")),
        ("candidate:1 1 TCP 1 192.0.2.1 9 typ host tcptype sideways", .invalidExtension("tcptype sideways")),
    ])
    func malformed(_ text: String, _ expected: IceCandidateParseError) {
        #expect(throws: expected) { try IceCandidate(parsing: text) }
    }

    /// 10 000 random, truncated and mutated strings: each either parses into a candidate that
    /// round-trips, or throws the typed error. Nothing traps.
    @Test func randomAndTruncatedInputNeverCrash() {
        var rng = SplitMix64(seed: 0xCA11_0DE5)
        let alphabet = Array("candidate: typ host srflx relay prflx raddr rport tcptype UDP TCP 0123456789.:abcdef+/-_\u{0}\u{7F}é\t\r\n")
        var parsed = 0, rejected = 0
        for i in 0..<10_000 {
            let input: String
            switch i % 4 {
            case 0:  // a valid attribute cut at a random point
                let base = Array(Self.valid[Int(rng.next() % UInt64(Self.valid.count))])
                input = String(base.prefix(Int(rng.next() % UInt64(base.count + 1))))
            case 1:  // a valid attribute with a few characters replaced
                var base = Array(Self.valid[Int(rng.next() % UInt64(Self.valid.count))])
                for _ in 0..<(1 + Int(rng.next() % 3)) {
                    base[Int(rng.next() % UInt64(base.count))] = alphabet[Int(rng.next() % UInt64(alphabet.count))]
                }
                input = String(base)
            case 2:  // random characters after the prefix
                let n = Int(rng.next() % 80)
                input = "candidate:" + String((0..<n).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] })
            default:  // random bytes, decoded leniently
                let n = Int(rng.next() % 120)
                input = String(decoding: (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }, as: UTF8.self)
            }
            do {
                let candidate = try IceCandidate(parsing: input)
                parsed += 1
                #expect((try? IceCandidate(parsing: candidate.description)) == candidate, "round trip of \(input.debugDescription)")
            } catch {
                rejected += 1
                #expect(!error.description.isEmpty)
            }
        }
        #expect(parsed + rejected == 10_000)
        // Most of these inputs are broken; a parser that accepted them all would be wrong.
        #expect(rejected > 7_000, "only \(rejected) of 10 000 rejected")
        #expect(parsed > 100, "only \(parsed) of 10 000 accepted: the valid truncations should parse")
    }

    @Test func serverAddressesAndTurnSpecsParse() {
        #expect(IceServerAddress("stun.example.org:3478") == IceServerAddress(host: "stun.example.org", port: 3478))
        #expect(IceServerAddress("[2001:db8::1]:3478") == IceServerAddress(host: "2001:db8::1", port: 3478))
        #expect(IceServerAddress("nohost") == nil)
        #expect(IceServerAddress("host:0") == nil)
        #expect(IceServerAddress("host:99999") == nil)
        let turn = TurnServer(spec: "alice:s3cr:et@turn.example.org:3478?transport=tcp")
        #expect(turn == TurnServer(address: .init(host: "turn.example.org", port: 3478), username: "alice", password: "s3cr:et", transport: .tcp))
        #expect(TurnServer(spec: "alice:pw@127.0.0.1:3478")?.transport == .udp)
        #expect(TurnServer(spec: "alice@127.0.0.1:3478") == nil)
        #expect(TurnServer(spec: "alice:pw@127.0.0.1:3478?transport=sctp") == nil)
    }
}
