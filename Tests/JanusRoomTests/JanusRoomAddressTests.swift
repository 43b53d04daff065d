import JanusRoom
import Testing

/// A Janus room's address as written: `janus:http://HOST[:PORT][/PATH]#ROOM`.
@Suite struct JanusRoomAddressTests {
    @Test func aFullAddressGivesItsHostPortPathAndRoom() throws {
        let address = try #require(JanusRoomAddress("janus:http://127.0.0.1:8088/janus#1234"))
        #expect(address == JanusRoomAddress(host: "127.0.0.1", port: 8088, path: "/janus", room: "1234"))
        #expect(JanusRoomAddress.problem("janus:http://127.0.0.1:8088/janus#1234") == nil)
    }

    @Test func aBareHostTakesJanussOwnPortAndPath() throws {
        let address = try #require(JanusRoomAddress("janus:http://host#lobby"))
        #expect(address.host == "host")
        #expect(address.port == 8088)
        #expect(address.path == "/janus")
        #expect(address.room == "lobby")
    }

    @Test func anIPv6HostIsReadFromItsBrackets() throws {
        let address = try #require(JanusRoomAddress("janus:http://[::1]:9000#1234"))
        #expect(address == JanusRoomAddress(host: "::1", port: 9000, path: "/janus", room: "1234"))
    }

    @Test func aCustomPathLosesItsTrailingSlash() throws {
        let address = try #require(JanusRoomAddress("janus:http://janus.example.org:8089/gateway/api/#lobby"))
        #expect(address == JanusRoomAddress(host: "janus.example.org", port: 8089, path: "/gateway/api", room: "lobby"))
    }

    @Test func theDescriptionIsTheFullAddressAndReadsBackAsTheSameAddress() throws {
        let written: [(text: String, shown: String)] = [
            ("janus:http://127.0.0.1:8088/janus#1234", "janus:http://127.0.0.1:8088/janus#1234"),
            ("janus:http://host#lobby", "janus:http://host:8088/janus#lobby"),
            ("janus:http://[::1]:9000#1234", "janus:http://[::1]:9000/janus#1234"),
            ("janus:http://janus.example.org:8089/gateway/api/#lobby", "janus:http://janus.example.org:8089/gateway/api#lobby"),
            ("janus:ws://janus.example.org#1234", "janus:ws://janus.example.org:8188#1234"),
            ("janus:ws://127.0.0.1:9000/ws#lobby", "janus:ws://127.0.0.1:9000/ws#lobby"),
            ("janus:unix:/run/janus/api.sock#1234", "janus:unix:/run/janus/api.sock#1234"),
        ]
        for (text, shown) in written {
            let address = try #require(JanusRoomAddress(text), "\(text)")
            #expect(address.description == shown)
            #expect(JanusRoomAddress(address.description) == address, "\(text)")
        }
    }

    @Test func anythingElseIsRefusedWithAReason() {
        let refused: [(text: String, says: String)] = [
            ("janus:wss://h#1", "http:// or ws://"),
            ("janus:unix:run/janus.sock#1", "a Unix socket's path is absolute"),
            ("janus:unix:/run/janus.sock", "the room is missing"),
            ("janus:http://::1#1", "an IPv6 address goes in brackets"),
            ("janus:http://[::1]x#1", "'x' after the address"),
            ("janus:http://h:+80#1", "a bad port"),
            ("janus:http://h:8088/janus", "the room is missing"),
            ("janus:http://:8088#1", "the host is missing"),
            ("janus:http://h:99999#1", "a bad port"),
            ("janus:http://[::1]:0#1", "a bad port"),
            ("sip:x", "a Janus room is janus:http://HOST[:PORT][/PATH]#ROOM"),
            ("janus:http://h#my room", "'my room' is not a room id"),
        ]
        for (text, says) in refused {
            #expect(JanusRoomAddress(text) == nil, "\(text)")
            let problem = JanusRoomAddress.problem(text)
            #expect(problem?.contains(says) == true, "\(text): \(problem ?? "no problem found")")
        }
    }

    @Test func aRoomOfDigitsIsANumberAndAnyOtherAString() {
        let numbered: JanusJSON = .integer(1234)
        let named: JanusJSON = .string("lobby")
        let zeroLed: JanusJSON = .string("007")  // a number would lose its zeros: Janus would look for room 7
        #expect(JanusRoomAddress(host: "h", room: "1234").roomValue == numbered)
        #expect(JanusRoomAddress(host: "h", room: "lobby").roomValue == named)
        #expect(JanusRoomAddress(host: "h", room: "007").roomValue == zeroLed)
    }
}

/// The JSON values Janus's API speaks: read, written, ids kept exact.
@Suite struct JanusJSONTests {
    @Test func anObjectWithNestedArraysReadsBackAsItself() throws {
        let text = #"{"a":[1,[2,"x"],{"b":null}],"c":true,"d":"e/f"}"#
        let value = try #require(JanusJSON.parse(Array(text.utf8)))
        let expected: JanusJSON = ["a": [1, [2, "x"], ["b": .null]], "c": true, "d": "e/f"]
        #expect(value == expected)
        #expect(String(decoding: value.serialized, as: UTF8.self) == text)
        #expect(JanusJSON.parse(value.serialized) == value)
    }

    @Test func aSixteenDigitIdStaysExact() throws {
        let value = try #require(JanusJSON.parse(Array(#"{"janus":"success","data":{"id":7396681430551687}}"#.utf8)))
        let id: JanusJSON = .integer(7_396_681_430_551_687)
        #expect(value["data"]?["id"] == id)
        #expect(value["data"]?["id"]?.integer == 7_396_681_430_551_687)
        #expect(value["data"]?["id"]?.idText == "7396681430551687")
        #expect(String(decoding: value.serialized, as: UTF8.self).contains(#""id":7396681430551687"#))
    }

    @Test func bytesThatAreNotJSONReadAsNothing() {
        #expect(JanusJSON.parse(Array("not json".utf8)) == nil)
        #expect(JanusJSON.parse(Array(#"{"janus":"#.utf8)) == nil)
        #expect(JanusJSON.parse([0xC3, 0x28]) == nil)  // not UTF-8
        #expect(JanusJSON.parse([]) == nil)
    }
}
