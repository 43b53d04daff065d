// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "CallNode",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "CallNode", targets: ["CallNode"]),
        .library(name: "CallNodeTestKit", targets: ["CallNodeTestKit"]),
        .executable(name: "callnode", targets: ["callnode"]),
        .executable(name: "callnode-bench", targets: ["callnode-bench"]),
        .executable(name: "callnode-sim", targets: ["callnode-sim"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.0.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.0"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.0"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-configuration", from: "1.4.0", traits: [.defaults, "YAML"]),
        .package(url: "https://github.com/jpsim/Yams", from: "6.0.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/ordo-one/malloc-interposer", from: "1.6.1"),
        .package(url: "https://github.com/apple/swift-system", from: "1.5.0"),
    ],
    targets: [
        // One system-library target per C library; each header holds prefixed static inline
        // helpers for what Swift cannot import (macros, variadics).
        // libnice's own pkg-config file brings `-pthread` (through gupnp-igd), which SwiftPM
        // refuses with a warning on every build: glib's gives the include paths libnice's
        // headers need (theirs are under /usr/include), and the module map links libnice.
        .systemLibrary(
            name: "CNice", pkgConfig: "glib-2.0",
            providers: [.apt(["libnice-dev"])]),
        .systemLibrary(
            name: "CSRTP", pkgConfig: "libsrtp2",
            providers: [.apt(["libsrtp2-dev"])]),
        .systemLibrary(
            name: "COpus", pkgConfig: "opus",
            providers: [.apt(["libopus-dev"])]),
        .systemLibrary(
            name: "CALSA", pkgConfig: "alsa",
            providers: [.apt(["libasound2-dev"])]),
        .systemLibrary(
            name: "CSpeexDSP", pkgConfig: "speexdsp",
            providers: [.apt(["libspeexdsp-dev"])]),
        .systemLibrary(
            name: "CSSL", pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]),
        .systemLibrary(
            name: "CSofiaSIP", pkgConfig: "sofia-sip-ua",
            providers: [.apt(["libsofia-sip-ua-dev"])]),
        // sofia-sip's user agent behind plain C: its tag lists are variadic macros, and all of
        // it runs on the agent's own thread.
        .target(name: "CSofiaShim", dependencies: ["CSofiaSIP"]),
        // SIP on sofia-sip: the user agent (its thread, its events) in Swift's terms.
        .target(name: "SIP", dependencies: ["CSofiaShim", "Locking", "POSIX"]),

        // libsrtp's ciphers (AES-ICM, AES-GCM, HMAC-SHA1) on OpenSSL, replacing the NSS ones
        // Debian's libsrtp2 is built with (a context made per packet).
        .target(name: "CSRTPOpenSSL", dependencies: ["CSRTP", "CSSL"]),

        // The primitives shared state uses: a lock on pthread_mutex (which ThreadSanitizer can
        // see), a condition lock, and a broadcaster that fans one event stream out to many.
        .target(name: "Locking"),
        // The process's threads and system calls: the one way to make a thread (named, joined or
        // detached) and the one funnel for errno (syscall(where:), as swift-nio's).
        .target(name: "POSIX"),
        // The one clock every timer of a node runs on (continuous in production, manual in tests),
        // and the helpers on Duration every module uses.
        .target(name: "Clocks"),
        .target(
            name: "ICE",
            dependencies: [
                "CNice", "Clocks", "Locking", "POSIX",
                .product(name: "Logging", package: "swift-log"),
            ]),
        // SRTP key and suite values, shared by key exchange (SDES, DTLS) and the media path.
        .target(name: "SRTPKeys"),
        .target(name: "RTP", dependencies: ["Clocks"]),
        .target(name: "SDP", dependencies: ["RTP"]),
        // One call's state machine: every decision of a call as a plain value (inputs in,
        // actions out), with no networking, media or concurrency, and the signals a call speaks
        // in its own terms (dialects map them to their wires).
        .target(name: "CallCore", dependencies: ["SDP"]),
        // A SIP dialog's decisions as a plain value (offer and answer in INVITE, 18x, 200,
        // re-INVITE and ACK; glare; refusals; an encrypted offer a phone refuses made again in
        // plain RTP): the call's signals and the wire's events in, actions out. No sofia.
        .target(name: "SIPDialog", dependencies: ["CallCore", "SDP"]),
        // A Janus room's session as a plain value (create, attach, join with the offer, the
        // answer, participants, keep-alive, leave; Janus's errors in the user's terms) and its JSON.
        .target(name: "JanusRoom", dependencies: ["CallCore"]),
        // Janus's APIs: HTTP (requests posted as JSON, events by long poll) and WebSocket on
        // swift-nio, and its Unix socket (SOCK_SEQPACKET, which swift-nio has not: a reader thread).
        .target(
            name: "Janus",
            dependencies: [
                "JanusRoom", "POSIX",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ]),
        // Opus (encoder, decoder, packet inspection): the codec, apart from where audio goes.
        .target(name: "AudioCodec", dependencies: ["COpus", "Clocks"]),
        // Audio endpoints: sources and sinks, ALSA devices on their own I/O threads, WAV files,
        // tones and synthetic speech.
        .target(name: "AudioDevices", dependencies: ["CALSA", "Clocks", "Locking", "POSIX"]),
        // End-to-end frame encryption (AES-256-GCM over each frame, keys agreed with P-256).
        .target(
            name: "FrameCrypto",
            dependencies: ["CSSL", "SRTPKeys", .product(name: "Crypto", package: "swift-crypto")]),
        // The media clock: frame periods paced on media threads of its own (or stepped by hand in
        // tests), and the load governor that lowers codec complexity when those threads fall behind.
        .target(name: "MediaTiming", dependencies: ["Locking", "POSIX"]),
        // Voice processing on the microphone signal (speexdsp's echo canceller, noise suppression
        // and gain control): what the audio session needs, without the codec or SRTP.
        .target(name: "VoiceProcessing", dependencies: ["CSpeexDSP", "AudioDevices", "Clocks", "Locking"]),
        // One call's media pipeline: the media actor (capture, encoding, RTP with redundancy,
        // SRTP, the jitter buffer, playout) on the media clock.
        .target(
            name: "Media",
            dependencies: [
                "RTP", "SRTPKeys", "AudioCodec", "AudioDevices", "FrameCrypto", "MediaTiming", "CSRTP", "CSRTPOpenSSL",
                "CSpeexDSP", "Locking",
            ]),
        // DTLS-SRTP (RFC 5763/5764): OpenSSL's DTLS over memory BIOs, keys into the SRTP path.
        .target(
            name: "DTLS",
            dependencies: ["CSSL", "SRTPKeys", "Clocks", "Locking"]),
        .target(
            name: "AudioSession",
            dependencies: ["MediaTiming", "VoiceProcessing", "AudioDevices", "CALSA", "Clocks", "Locking"]),
        .target(
            name: "Calls",
            dependencies: [
                "CallCore", "AudioSession", "RTP", "Clocks", "Locking", "POSIX",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        // Test doubles that embedders may use too: a manual clock for every injected timer, two
        // call managers joined in memory, an in-memory ICE network for whole nodes on manual time.
        .target(name: "CallNodeTestKit", dependencies: ["CallNode", "Calls", "ICE", "Media", "MediaTiming", "Clocks", "Locking", "SIP", "TestingPrimitives"]),
        // Node identity (self-signed certificate, fingerprint) and the mutual-TLS signaling channel.
        .target(
            name: "Signaling",
            dependencies: [
                "CallCore", "Clocks", "Locking",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .target(
            name: "CallNode",
            dependencies: [
                "CallCore", "ICE", "RTP", "SDP", "Media", "MediaTiming", "VoiceProcessing", "AudioDevices", "DTLS", "AudioSession",
                "Calls", "Signaling", "SIP", "SIPDialog", "Janus", "JanusRoom", "Clocks", "Locking", "POSIX",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            exclude: ["Page/call.html", "Page/call.js"],  // the call page's files, carried in the binary by EmbedPage
            plugins: ["EmbedPage"]),
        // Text files as Swift string constants, for the plugin below (build time only).
        .executableTarget(name: "EmbedFiles"),
        .plugin(name: "EmbedPage", capability: .buildTool(), dependencies: ["EmbedFiles"]),
        // The control API: a running node driven over HTTP and JSON (a Unix socket, or TCP on
        // loopback with a token), its events streamed; the objects `--json` prints.
        .target(
            name: "NodeControl",
            dependencies: [
                "CallNode", "Calls", "Media", "AudioDevices", "Signaling", "Locking",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            exclude: ["Page/console.html", "Page/console.js", "Page/console.css"],  // the console's files, carried in the binary by EmbedPage
            plugins: ["EmbedPage"]),
        // The command line's settings: flags over CALLNODE_* environment variables over the
        // node's config.yaml over defaults, with secrets kept out of argv and out of output.
        .target(
            name: "NodeSettings",
            dependencies: [
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]),
        .executableTarget(
            name: "callnode",
            dependencies: [
                "CallNode", "NodeSettings", "NodeControl", "POSIX",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]),
        // Deterministic simulation: whole nodes on one manual clock, every job of the process
        // ordered by a seed, actions and faults from the same seed, invariants after each step.
        .target(
            name: "CallNodeSimulation",
            dependencies: ["CallNode", "CallNodeTestKit", "CallCore", "Calls", "AudioDevices", "Locking", "SIPDialog", "TestingPrimitives"]),
        // The host's randomness from a seed (getrandom, arc4random, /dev/urandom), for the
        // simulator's executable only: it replaces C library symbols process-wide.
        .target(name: "CSimHost"),
        .executableTarget(
            name: "callnode-sim",
            dependencies: [
                "CallNodeSimulation", "CallCore", "CSimHost", "SIPDialog",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            linkerSettings: [.unsafeFlags(["-Xlinker", "--export-dynamic"])]),
        // The bare C anchors (libnice, Opus + SRTP, SpeexDSP with no node around them) are the
        // one place outside the ICE and media modules that calls the C libraries: they measure
        // the C work the node's figures are read against.
        .executableTarget(
            name: "callnode-bench",
            dependencies: [
                "CallNode",
                "CallNodeTestKit",
                "AudioCodec",
                "Janus",
                "JanusRoom",
                "ICE",
                "AudioSession",
                "Calls",
                "Media",
                "MediaTiming",
                "VoiceProcessing",
                "POSIX",
                .product(name: "Logging", package: "swift-log"),
                "CNice", "COpus", "CSRTP", "CSpeexDSP",
                .product(name: "GRDB", package: "GRDB.swift"),
                // Counts allocations for `callnode-bench allocations` (which preloads it).
                .product(name: "MallocInterposerSwift", package: "malloc-interposer"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]),
        // The network-facing parsers as fuzz targets (scripts/fuzz builds callnode-fuzz with
        // libFuzzer; without it, callnode-fuzz replays saved inputs).
        .target(
            name: "FuzzTargets",
            dependencies: [
                "SDP", "RTP", "Media", "ICE", "Signaling", "SIP", "SIPDialog", "CallCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]),
        .executableTarget(name: "callnode-fuzz", dependencies: ["FuzzTargets"]),
        .executableTarget(
            name: "ice-loopback",
            dependencies: ["CallNode"],
            path: "Examples/IceLoopback"),
        .executableTarget(
            name: "two-nodes",
            dependencies: ["CallNode"],
            path: "Examples/TwoNodes"),
        .executableTarget(
            name: "answering-service",
            dependencies: [
                "CallNode", "Locking",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Examples/AnsweringService"),
        .executableTarget(
            name: "ownership-study",
            dependencies: ["CallNode", "CallNodeTestKit"],
            path: "Examples/OwnershipStudy"),
        .executableTarget(
            name: "two-phones",
            dependencies: ["CallNode", "CallNodeTestKit"],
            path: "Examples/TwoPhones"),

        // A seeded generator and a tone detector, for the tests and the simulator alike.
        .target(name: "TestingPrimitives"),
        // Helpers shared by the test targets (child processes for test servers).
        .target(
            name: "CallNodeTestSupport",
            dependencies: ["Locking", "POSIX", "TestingPrimitives"],
            path: "Tests/TestSupport",
            // Optimised in every configuration: judging a recording (AudioAlignment's
            // correlation searches) is millions of multiply-adds that a debug build would make
            // compete with the real-time calls the suite runs beside it. No product contains it.
            swiftSettings: [.unsafeFlags(["-O"])]),
        // The call's state machine alone: no concurrency, no networking, no media.
        .testTarget(
            name: "CallCoreTests",
            dependencies: ["CallCore", "SDP"]),
        .testTarget(
            name: "ICETests",
            dependencies: ["ICE", "Clocks", "Locking", "CallNodeTestKit", "CallNodeTestSupport"]),
        .testTarget(
            name: "DTLSTests",
            dependencies: ["DTLS", "Media", "Signaling", "Locking", "Clocks", "CallNodeTestKit", "CallNodeTestSupport"]),
        // The SIP dialog's value alone: no concurrency, no sofia.
        .testTarget(
            name: "SIPDialogTests",
            dependencies: ["SIPDialog", "CallCore", "SDP"]),
        // A Janus room's session value alone: no concurrency, no Janus.
        .testTarget(
            name: "JanusRoomTests",
            dependencies: ["JanusRoom", "CallCore"]),
        .testTarget(
            name: "SIPTests",
            dependencies: ["SIP", "CallNodeTestSupport"]),
        .testTarget(
            name: "SDPTests",
            dependencies: ["SDP", "RTP", "CallNodeTestSupport"]),
        .testTarget(
            name: "RTPTests",
            dependencies: ["RTP", "CallNodeTestSupport"]),
        .testTarget(
            name: "MediaTests",
            dependencies: ["Media", "MediaTiming", "RTP", "Locking", "CallNodeTestKit", "CallNodeTestSupport", "TestingPrimitives"]),
        // The codec, the frame cipher, voice processing, a node's settings and its control API,
        // each on its own (the node's calls through them are CallNodeTests').
        .testTarget(name: "AudioCodecTests", dependencies: ["AudioCodec", "AudioDevices"]),
        .testTarget(name: "AudioDevicesTests", dependencies: ["AudioDevices", "TestingPrimitives"]),
        .testTarget(name: "FrameCryptoTests", dependencies: ["FrameCrypto"]),
        .testTarget(name: "VoiceProcessingTests", dependencies: ["VoiceProcessing", "AudioDevices", "CallNodeTestSupport"]),
        .testTarget(name: "NodeSettingsTests", dependencies: ["NodeSettings"]),
        .testTarget(
            name: "NodeControlTests",
            dependencies: ["NodeControl", "CallNode", "CallNodeTestKit", "CallNodeTestSupport", "Locking"]),
        .testTarget(
            name: "CallNodeTests",
            dependencies: ["CallNode", "CallNodeTestKit", "CallNodeTestSupport", "NodeControl", "SIP", "CallNodeSimulation",
                           "AudioCodec", "ICE", "Media", "Signaling", "Locking"]),
        .testTarget(
            name: "SignalingTests",
            dependencies: [
                "Signaling", "CallCore", "SDP", "Locking", "CallNodeTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .testTarget(
            name: "AudioSessionTests",
            dependencies: ["AudioSession", "Media", "Clocks", "Locking", "CallNodeTestKit", "CallNodeTestSupport"]),
        // A process the Recents crash test kills mid-call.
        .executableTarget(
            name: "calls-crash-child",
            dependencies: ["Calls", "AudioSession"],
            path: "Tests/CallsCrashChild"),
        .testTarget(
            name: "POSIXTests",
            dependencies: ["POSIX"]),
        .testTarget(
            name: "CallsTests",
            dependencies: ["Calls", "AudioSession", "Media", "MediaTiming", "Clocks", "CallNodeTestKit", "CallNodeTestSupport",
                           .product(name: "GRDB", package: "GRDB.swift")]),
        .testTarget(
            name: "FuzzTests",
            dependencies: ["FuzzTargets"]),
        .testTarget(
            name: "CBindingsTests",
            dependencies: ["CSRTP", "COpus", "CALSA", "Media", "CallNodeTestSupport"]),
        // The repository's own rules: the documents against the tree (every type, file, folder
        // and module they name exists, every link resolves), the manifest against the imports.
        .testTarget(
            name: "RepositoryTests"),
    ],
    swiftLanguageModes: [.v6]
)
