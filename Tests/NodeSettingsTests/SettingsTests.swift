import Foundation
import NodeSettings
import Testing

/// The command line's settings: flag > CALLNODE_* variable > config.yaml > default.
@Suite struct SettingsTests {
    static let keys = [
        SettingKey("bitrate", default: "40000"),
        SettingKey("frame-ms", default: "20"),
        SettingKey("relay"),
        SettingKey("auto-answer", .flag, default: "false"),
        SettingKey("turn", .list, secret: true),
        SettingKey("bind", .list),
        SettingKey("secret", secret: true),
    ]

    func home(_ yaml: String?) throws -> String {
        let directory = NSTemporaryDirectory() + "callnode-settings-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        if let yaml { try yaml.write(toFile: directory + "/config.yaml", atomically: true, encoding: .utf8) }
        return directory
    }

    @Test func aFlagBeatsTheEnvironmentWhichBeatsTheFileWhichBeatsTheDefault() async throws {
        let home = try home("bitrate: 32000\nframe-ms: 40\nrelay: relay.example:7700\nauto-answer: yes\n")
        defer { try? FileManager.default.removeItem(atPath: home) }
        let settings = try await NodeSettings(home: home, keys: Self.keys,
                                              environment: ["CALLNODE_BITRATE": "24000", "CALLNODE_FRAME_MS": "60", "PATH": "/bin"])
        let bitrate = try settings.resolve("bitrate", flag: ["16000"])
        #expect(bitrate.value == "16000" && bitrate.source == .flag && bitrate.origin == "--bitrate")
        let frame = try settings.resolve("frame-ms")
        #expect(frame.value == "60" && frame.source == .environment && frame.origin == "CALLNODE_FRAME_MS")
        let relay = try settings.resolve("relay")
        #expect(relay.value == "relay.example:7700" && relay.source == .file && relay.origin.hasSuffix("config.yaml"))
        #expect(try settings.resolve("auto-answer").value == "true")
        // A flag given as off wins over the file's on.
        #expect(try settings.resolve("auto-answer", flag: ["false"]).value == "false")
        let bind = try settings.resolve("bind")
        #expect(bind.values.isEmpty && bind.source == .default)
        #expect(try await NodeSettings(home: home, keys: Self.keys, environment: [:]).resolve("bitrate").value == "32000")
        #expect(try await NodeSettings(home: home + "/none", keys: Self.keys, environment: [:]).resolve("bitrate").value == "40000")
    }

    @Test func listsComeAsYAMLListsOrCommaSeparatedAndSecretsAreMasked() async throws {
        let home = try home("turn:\n  - alice:pa55@turn.example:3478\n  - bob:w0rd@turn2.example:443?transport=tcp\nsecret: page-secret-1\n")
        defer { try? FileManager.default.removeItem(atPath: home) }
        let fromFile = try await NodeSettings(home: home, keys: Self.keys, environment: [:])
        let turn = try fromFile.resolve("turn")
        #expect(turn.values == ["alice:pa55@turn.example:3478", "bob:w0rd@turn2.example:443?transport=tcp"])
        #expect(turn.shown == ["********@turn.example:3478", "********@turn2.example:443?transport=tcp"])
        #expect(try fromFile.resolve("secret").shown == ["********"])
        #expect(try fromFile.resolve("bitrate").shown == ["40000"])
        let shownEverywhere = try fromFile.resolveAll().flatMap(\.shown).joined(separator: " ")
        #expect(!shownEverywhere.contains("pa55") && !shownEverywhere.contains("w0rd") && !shownEverywhere.contains("page-secret"))

        let fromEnvironment = try await NodeSettings(home: home, keys: Self.keys,
                                                     environment: ["CALLNODE_BIND": "10.0.0.1, 10.0.0.2", "CALLNODE_TURN": "c:d@t:3478"])
        #expect(try fromEnvironment.resolve("bind").values == ["10.0.0.1", "10.0.0.2"])
        #expect(try fromEnvironment.resolve("turn").values == ["c:d@t:3478"])
        // Others can read a file holding secrets: a warning says so.
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: home + "/config.yaml")
        #expect(try await NodeSettings(home: home, keys: Self.keys, environment: [:]).warnings.contains { $0.contains("chmod 600") })
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: home + "/config.yaml")
        #expect(try await NodeSettings(home: home, keys: Self.keys, environment: [:]).warnings.isEmpty)
    }

    @Test func badFilesAndValuesNameWhereTheyCameFrom() async throws {
        let misspelt = try home("bitrat: 32000\n")
        defer { try? FileManager.default.removeItem(atPath: misspelt) }
        let settings = try await NodeSettings(home: misspelt, keys: Self.keys, environment: ["CALLNODE_AUTO_ANSWER": "maybe"])
        #expect(settings.warnings.contains { $0.contains("unknown setting 'bitrat'") && $0.contains("did you mean 'bitrate'") })
        #expect(throws: SettingsError.self) { try settings.resolve("auto-answer") }
        do {
            _ = try settings.resolve("auto-answer")
        } catch {
            #expect(error.description.contains("CALLNODE_AUTO_ANSWER") && error.description.contains("maybe"))
        }

        let list = try home("relay:\n  - a:1\n  - b:2\n")
        defer { try? FileManager.default.removeItem(atPath: list) }
        let listed = try await NodeSettings(home: list, keys: Self.keys, environment: [:])
        #expect(throws: SettingsError.self) { try listed.resolve("relay") }

        let broken = try home("bitrate: [32000\n")
        defer { try? FileManager.default.removeItem(atPath: broken) }
        await #expect(throws: SettingsError.self) { try await NodeSettings(home: broken, keys: Self.keys, environment: [:]) }
        let scalar = try home("just a line\n")
        defer { try? FileManager.default.removeItem(atPath: scalar) }
        await #expect(throws: SettingsError.self) { try await NodeSettings(home: scalar, keys: Self.keys, environment: [:]) }
    }
}
