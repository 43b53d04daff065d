import Configuration
import Foundation
import SystemPackage
import Yams

/// One setting the command line knows: its key (the long flag's name, also the config file's key
/// and, upper-cased with `CALLNODE_` before it, the environment variable's name).
public struct SettingKey: Sendable, Hashable {
    /// How the setting's values are written.
    public enum Kind: Sendable, Hashable {
        /// One value (`bitrate: 32000`).
        case value
        /// Several values: a YAML list, or comma-separated in the environment (`turn`, `bind`).
        case list
        /// On or off: a flag (`--auto-answer`, `--no-auto-answer`), `true`/`false` elsewhere.
        case flag
    }

    public let name: String
    public let kind: Kind
    /// A secret is never printed, and given on the command line it draws a warning.
    public let secret: Bool
    /// What applies when nothing sets it (nil: unset), as the flag would be written.
    public let defaultValue: String?

    public init(_ name: String, _ kind: Kind = .value, secret: Bool = false, default defaultValue: String? = nil) {
        self.name = name
        self.kind = kind
        self.secret = secret
        self.defaultValue = defaultValue
    }

    /// The environment variable that sets it: `CALLNODE_` and the name upper-cased, `-` as `_`.
    public var environmentName: String {
        "CALLNODE_" + name.uppercased().replacingOccurrences(of: "-", with: "_")
    }
}

/// Where a setting's value came from, highest precedence first.
public enum SettingSource: String, Sendable, Hashable {
    case flag, environment, file, `default`
}

/// A setting's merged value and where it came from.
public struct ResolvedSetting: Sendable, Equatable {
    public let key: String
    /// The values (one for `.value` and `.flag`, any number for `.list`; empty: unset).
    public let values: [String]
    public let source: SettingSource
    /// Where exactly, for messages: `--bitrate`, `CALLNODE_BITRATE`, `bitrate in /home/…/config.yaml`.
    public let origin: String
    public let secret: Bool

    public init(key: String, values: [String], source: SettingSource, origin: String, secret: Bool) {
        self.key = key
        self.values = values
        self.source = source
        self.origin = origin
        self.secret = secret
    }

    public var value: String? { values.first }

    /// Secrets masked: `USER:PASS@HOST` shows only the host; anything else as `********`.
    public var shown: [String] {
        guard secret else { return values }
        return values.map { value in
            if let at = value.lastIndex(of: "@") { return "********" + value[at...] }
            return "********"
        }
    }
}

/// A setting from the environment or the config file that could not be read.
public struct SettingsError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The command line's settings besides its flags: `CALLNODE_*` environment variables and the
/// node's `config.yaml`, merged flag > environment > file > default.
///
/// Reading is done once, when a command starts; `resolve` is then a pure lookup, so a command
/// reads every setting from the same snapshot. Values are strings as a flag would be written:
/// the command parses and checks them the same way whatever their source, and its error message
/// names where a bad value came from (``ResolvedSetting/origin``).
public struct NodeSettings: Sendable {
    /// The config file: `config.yaml` in the node's home.
    public let filePath: String
    /// Whether that file exists.
    public let fileExists: Bool
    /// Things worth telling the user that do not stop the command: unknown keys in the file, a
    /// file others can read that holds secrets.
    public private(set) var warnings: [String] = []

    private let catalogue: [String: SettingKey]
    private let environment: ConfigReader
    private let file: ConfigReader?

    /// The name of the config file in a node's home.
    public static let fileName = "config.yaml"

    /// Reads the environment and `HOME/config.yaml` (a missing file is no error).
    ///
    /// - Throws: ``SettingsError`` naming the file and the problem when it is not a YAML mapping.
    public init(home: String, keys: [SettingKey],
                environment variables: [String: String] = ProcessInfo.processInfo.environment) async throws(SettingsError) {
        catalogue = Dictionary(keys.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        let secrets = Set(keys.filter(\.secret).map(\.environmentName))
        let onlyOurs = variables.filter { $0.key.hasPrefix("CALLNODE_") }
        environment = ConfigReader(provider: EnvironmentVariablesProvider(
            environmentVariables: onlyOurs, secretsSpecifier: .specific(secrets)).prefixKeys(with: "callnode"))
        filePath = (home as NSString).appendingPathComponent(Self.fileName)
        fileExists = FileManager.default.fileExists(atPath: filePath)
        guard fileExists else {
            file = nil
            return
        }
        let text: String
        do {
            text = try String(contentsOfFile: filePath, encoding: .utf8)
        } catch {
            throw SettingsError("\(filePath): cannot be read: \(error.localizedDescription)")
        }
        let secretNames = Set(keys.filter(\.secret).map(\.name))
        do {
            let parsed = try Yams.compose(yaml: text)
            if let parsed, parsed.mapping == nil {
                throw SettingsError("\(filePath): expected `key: value` lines (a YAML mapping)")
            }
            let present = parsed?.mapping?.keys.compactMap(\.string) ?? []
            for key in present where catalogue[key] == nil {
                let near = Self.nearest(key, in: Array(catalogue.keys))
                warnings.append("\(filePath): unknown setting '\(key)'" + (near.map { " (did you mean '\($0)'?)" } ?? "") + "; it is ignored")
            }
            if present.contains(where: secretNames.contains), Self.othersCanRead(filePath) {
                warnings.append("\(filePath) holds secrets but other users can read it: chmod 600 \(filePath)")
            }
            let provider = try await FileProvider<YAMLSnapshot>(
                parsingOptions: .init(secretsSpecifier: .specific(secretNames)),
                filePath: FilePath(filePath), allowMissing: true)
            file = ConfigReader(provider: provider)
        } catch let error as SettingsError {
            throw error
        } catch {
            throw SettingsError("\(filePath): not valid YAML: \(error)")
        }
    }

    /// The key's merged value: the flag's if it was given, else the environment's, else the
    /// file's, else the default.
    ///
    /// - Parameter flag: what the command line gave (empty: not given). For a `.flag` key,
    ///   `"true"` or `"false"`.
    /// - Throws: ``SettingsError`` when the environment or the file holds a value of the wrong
    ///   shape (a list where one value belongs, a flag that is neither true nor false).
    public func resolve(_ name: String, flag: [String] = []) throws(SettingsError) -> ResolvedSetting {
        guard let key = catalogue[name] else { preconditionFailure("no setting '\(name)' in the catalogue") }
        if !flag.isEmpty {
            return ResolvedSetting(key: name, values: flag, source: .flag, origin: "--\(name)", secret: key.secret)
        }
        let configKey = ConfigKey(name)
        let variable = key.environmentName
        if let values = try read(environment, configKey, key, origin: variable) {
            return ResolvedSetting(key: name, values: values, source: .environment, origin: variable, secret: key.secret)
        }
        if let file {
            let origin = "\(name) in \(filePath)"
            if let values = try read(file, configKey, key, origin: origin) {
                return ResolvedSetting(key: name, values: values, source: .file, origin: origin, secret: key.secret)
            }
        }
        return ResolvedSetting(key: name, values: key.defaultValue.map { [$0] } ?? [], source: .default,
                               origin: "--\(name)", secret: key.secret)
    }

    /// Every known key, resolved without flags: what `config show` prints.
    public func resolveAll() throws(SettingsError) -> [ResolvedSetting] {
        var all: [ResolvedSetting] = []
        for name in catalogue.keys.sorted() { all.append(try resolve(name)) }
        return all
    }

    private func read(_ reader: ConfigReader, _ configKey: ConfigKey, _ key: SettingKey, origin: String) throws(SettingsError) -> [String]? {
        switch key.kind {
        case .list:
            if let list = reader.stringArray(forKey: configKey, isSecret: key.secret) {
                return list.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            }
            return reader.string(forKey: configKey, isSecret: key.secret).map { [$0] }
        case .value:
            guard let value = reader.string(forKey: configKey, isSecret: key.secret) else {
                if reader.stringArray(forKey: configKey) != nil {
                    throw SettingsError("\(origin) takes one value, not a list")
                }
                return nil
            }
            return [value]
        case .flag:
            guard let value = reader.string(forKey: configKey) else { return nil }
            switch value.lowercased() {
            case "true", "yes", "on", "1": return ["true"]
            case "false", "no", "off", "0": return ["false"]
            default: throw SettingsError("\(origin) must be true or false (got '\(value)')")
            }
        }
    }

    private static func othersCanRead(_ path: String) -> Bool {
        guard let mode = (try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? Int else { return false }
        return mode & 0o044 != 0
    }

    /// The known key closest to a misspelt one (at most two edits away).
    static func nearest(_ word: String, in candidates: [String]) -> String? {
        func distance(_ a: [Character], _ b: [Character]) -> Int {
            var previous = Array(0...b.count)
            for (i, x) in a.enumerated() {
                var current = [i + 1]
                for (j, y) in b.enumerated() {
                    current.append(min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1)))
                }
                previous = current
            }
            return previous[b.count]
        }
        let scored = candidates.map { ($0, distance(Array(word), Array($0))) }.filter { $0.1 <= 2 }
        return scored.min { $0.1 < $1.1 || ($0.1 == $1.1 && $0.0 < $1.0) }?.0
    }
}
