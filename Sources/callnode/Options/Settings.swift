import ArgumentParser
import CallNode
import Foundation
import NodeSettings

/// Every setting `listen`, `call`, `web` and `join` read from flags, `CALLNODE_*` variables or
/// the node's config.yaml. The name is the long flag's; defaults are written as the flag would be.
let settingKeys: [SettingKey] = [
    SettingKey("listen"),
    SettingKey("relay"),
    SettingKey("name"),
    SettingKey("auto-answer", .flag, default: "false"),
    SettingKey("conference", .flag, default: "false"),
    SettingKey("conference-room"),
    SettingKey("max-calls"),
    SettingKey("drain-grace"),
    SettingKey("accept-unknown", .flag, default: "false"),
    SettingKey("dnd", .flag, default: "false"),
    SettingKey("input", default: "tone:440"),
    SettingKey("output", default: "null"),
    SettingKey("speaker"),
    SettingKey("fallback-input"),
    SettingKey("fallback-output"),
    SettingKey("voice-processing", default: "auto"),
    SettingKey("prepare-recording", .flag, default: "false"),
    SettingKey("app-owned-audio", .flag, default: "false"),
    SettingKey("duration"),
    SettingKey("bitrate", default: "40000"),
    SettingKey("opus-complexity", default: "8"),
    SettingKey("complexity-follows-load", .flag, default: "true"),
    SettingKey("frame-ms", default: "20"),
    SettingKey("redundancy", default: RedundancyPolicy.adaptive.rawValue),
    SettingKey("ice-restart", default: "5"),
    SettingKey("resume-window", default: "30"),
    SettingKey("key-exchange", default: KeyExchange.dtls.rawValue),
    SettingKey("frame-encryption", default: FrameEncryptionPolicy.preferred.rawValue),
    SettingKey("playback-only", .flag, default: "false"),
    SettingKey("hold-audio", default: "silence"),
    SettingKey("metrics"),
    SettingKey("control"),
    SettingKey("control-token", secret: true),
    SettingKey("control-token-file"),
    SettingKey("console"),
    SettingKey("sip"),
    SettingKey("sip-user", default: "callnode"),
    SettingKey("sip-media-encryption", default: MediaEncryption.preferred.rawValue),
    SettingKey("sip-ice", .flag, default: "false"),
    SettingKey("sip-certificate"),
    SettingKey("sip-certificate-key"),
    SettingKey("sip-register"),
    SettingKey("sip-registrar"),
    SettingKey("sip-auth-user"),
    SettingKey("sip-keepalive", default: "25"),
    SettingKey("sip-password", secret: true),
    SettingKey("sip-password-file"),
    SettingKey("stun"),
    SettingKey("turn", .list, secret: true),
    SettingKey("turn-file"),
    SettingKey("relay-only", .flag, default: "false"),
    SettingKey("bind", .list),
    SettingKey("ice-tcp", .flag, default: "false"),
    SettingKey("consent-freshness", .flag, default: "false"),
    // `web`'s page.
    SettingKey("page", default: "127.0.0.1:8080"),
    SettingKey("secret", secret: true),
    SettingKey("secret-file"),
    SettingKey("ring-page", .flag, default: "false"),
    SettingKey("https", .flag, default: "false"),
    SettingKey("certificate"),
    SettingKey("certificate-key"),
]

/// Reads the environment and the home's config.yaml, or exits with one clear line.
func loadSettings(home: String) async throws -> NodeSettings {
    do {
        let settings = try await NodeSettings(home: home, keys: settingKeys)
        for warning in settings.warnings { printError("callnode: warning: \(warning)") }
        return settings
    } catch {
        printError("callnode: \(error)")
        throw ExitCode(1)
    }
}

/// Typed reads of merged settings, with errors that name where a bad value came from.
struct SettingsReader {
    let settings: NodeSettings

    func resolved(_ key: String, _ flag: String?) throws -> ResolvedSetting {
        do { return try settings.resolve(key, flag: flag.map { [$0] } ?? []) } catch { throw ValidationError(error.description) }
    }

    func list(_ key: String, _ flag: [String]) throws -> ResolvedSetting {
        do { return try settings.resolve(key, flag: flag) } catch { throw ValidationError(error.description) }
    }

    func string(_ key: String, _ flag: String?) throws -> String? { try resolved(key, flag).value }

    func flag(_ key: String, _ flag: Bool?) throws -> Bool {
        try resolved(key, flag.map { $0 ? "true" : "false" }).value == "true"
    }

    /// The value parsed by `parse`; a value it refuses is an error naming its origin and `what`.
    func parsed<T>(_ key: String, _ flag: String?, _ what: String, _ parse: (String) -> T?) throws -> T? {
        let setting = try resolved(key, flag)
        guard let value = setting.value else { return nil }
        guard let result = parse(value) else { throw ValidationError("\(setting.origin) '\(value)' is not \(what)") }
        return result
    }

    func number(_ key: String, _ flag: String?, _ range: ClosedRange<Double>, _ what: String) throws -> Double? {
        try parsed(key, flag, what) { Double($0).flatMap { range.contains($0) ? $0 : nil } }
    }

    func integer(_ key: String, _ flag: String?, _ range: ClosedRange<Int>, _ what: String) throws -> Int? {
        try parsed(key, flag, what) { Int($0).flatMap { range.contains($0) ? $0 : nil } }
    }

    func address(_ key: String, _ flag: String?) throws -> SignalAddress? {
        try parsed(key, flag, "HOST:PORT", SignalAddress.init)
    }

    /// A secret given on the command line is visible to every user of the machine (`ps`).
    func warnIfOnCommandLine(_ key: String, given: Bool) {
        guard given else { return }
        printError("callnode: warning: --\(key) on the command line can be read by every user of this machine (ps); "
                   + "put it in \(settings.filePath) (chmod 600), in \(SettingKey(key).environmentName), or in a file given with --\(key)-file")
    }

    /// Reads a secret file: one value per line, blank lines and `#` comments skipped.
    func secretLines(_ key: String, _ flag: String?) throws -> [String] {
        let setting = try resolved(key, flag)
        guard let path = setting.value else { return [] }
        let text: String
        do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
            throw ValidationError("\(setting.origin): cannot read \(path): \(error.localizedDescription)")
        }
        return text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
    }
}

struct Config: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the node's settings: flags over CALLNODE_* variables over HOME/config.yaml over defaults.",
        discussion: """
            Every long option of listen, call, web and join can be set in the node's config.yaml \
            (key: value, the option's name without --; lists as YAML lists) or in the environment \
            (CALLNODE_ and the name in capitals, - as _; lists comma-separated). A flag on the \
            command line wins, then the environment, then the file. --home itself comes from the \
            flag or CALLNODE_HOME. Secrets (turn, secret) are shown masked; keep them out of argv: \
            other users see it in ps.
            """,
        subcommands: [Show.self], defaultSubcommand: Show.self)

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print each setting, its value (secrets masked) and where it came from.",
            discussion: "Flags given here are merged as `listen` would merge them: `callnode config show --bitrate 32000`.")

        @OptionGroup var options: NodeOptions

        func run() async throws {
            let settings = try await loadSettings(home: options.home.home)
            // Check the merged values as a command would, so a bad one shows here first.
            _ = try options.setup(settings, defaultListen: nil)
            let flags = options.givenFlags
            print("# \(settings.filePath)\(settings.fileExists ? "" : " (not present)")")
            // Columns as wide as their longest entry: nothing is cut.
            var rows: [(key: String, value: String, source: String)] = []
            for key in settingKeys.map(\.name).sorted() {
                let resolved: ResolvedSetting
                do { resolved = try settings.resolve(key, flag: flags[key] ?? []) } catch {
                    throw ValidationError(error.description)
                }
                if options.json {
                    let object: [String: Any] = ["key": key, "value": resolved.shown, "source": resolved.source.rawValue]
                    let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
                    print(String(decoding: data, as: UTF8.self))
                } else {
                    rows.append((key, resolved.shown.isEmpty ? "(unset)" : resolved.shown.joined(separator: ", "), resolved.source.rawValue))
                }
            }
            let keyWidth = rows.map(\.key.count).max() ?? 0, valueWidth = rows.map(\.value.count).max() ?? 0
            for row in rows {
                let key = row.key + String(repeating: " ", count: keyWidth - row.key.count)
                let value = row.value + String(repeating: " ", count: valueWidth - row.value.count)
                print("\(key)  \(value)  \(row.source)")
            }
        }
    }
}
