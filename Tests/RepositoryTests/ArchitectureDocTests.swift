import Foundation
import Testing

/// `docs/ARCHITECTURE.md` kept true by the tree: every path, Swift file, folder, module and
/// type it names in backticks exists, and every member it names on a type (`LegState.handle`,
/// `NodeEvent.sipRegistration`) is declared somewhere. A renamed type or a moved file fails
/// here until the document follows.
@Suite struct ArchitectureDocTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Every file under `directories` (relative to the repository), relative paths.
    static func files(under directories: [String]) -> [String] {
        directories.flatMap { directory -> [String] in
            let base = root.appendingPathComponent(directory)
            guard let walker = FileManager.default.enumerator(at: base, includingPropertiesForKeys: nil) else { return [] }
            return walker.compactMap { ($0 as? URL)?.path.replacingOccurrences(of: root.path + "/", with: "") }
        }
    }

    /// The Swift sources of the package and its tests, as one text.
    static let swift: String = files(under: ["Sources", "Tests"]).filter { $0.hasSuffix(".swift") }
        .compactMap { try? String(contentsOf: root.appendingPathComponent($0), encoding: .utf8) }.joined(separator: "\n")

    /// What `document` names in backticks.
    static func named(in document: String) throws -> Set<String> {
        let text = try String(contentsOf: root.appendingPathComponent(document), encoding: .utf8)
        let pattern = try NSRegularExpression(pattern: "`([^`\\n]+)`")
        return Set(pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap {
            Range($0.range(at: 1), in: text).map { String(text[$0]) }
        })
    }

    static func declared(_ name: String) -> Bool {
        let escaped = NSRegularExpression.escapedPattern(for: name)
        return swift.range(of: "\\b(struct|class|enum|actor|protocol|typealias|extension)\\s+\(escaped)\\b", options: .regularExpression) != nil
            || swift.contains("@_spi(\(name))")
    }

    static func member(_ name: String) -> Bool {
        name == "init" || swift.range(of: "\\b(func|case|var|let)\\s+\(NSRegularExpression.escapedPattern(for: name))\\b", options: .regularExpression) != nil
    }

    @Test func everythingTheArchitectureNamesExists() throws {
        let all = Self.files(under: ["Sources", "Tests", "scripts", "contrib", "docs"])
        let fileNames = Set(all.map { ($0 as NSString).lastPathComponent })
        var folders = Set<String>()
        for path in all { folders.formUnion(path.split(separator: "/").dropLast().map(String.init)) }
        var missing: [String] = []
        for name in try Self.named(in: "docs/ARCHITECTURE.md").sorted() {
            if name.range(of: "^(Sources|Tests|scripts|docs|contrib)/", options: .regularExpression) != nil {
                let path = name.hasSuffix("/") ? String(name.dropLast()) : name
                if !FileManager.default.fileExists(atPath: Self.root.appendingPathComponent(path).path) { missing.append("the path \(name)") }
            } else if name.hasSuffix(".swift") {
                if !fileNames.contains(name) { missing.append("the file \(name)") }
            } else if name.range(of: "^[A-Z][A-Za-z0-9]*/$", options: .regularExpression) != nil {
                if !folders.contains(String(name.dropLast())) { missing.append("the folder \(name)") }
            } else if name.range(of: "^[A-Z][A-Za-z0-9]*(\\.[A-Za-z_][A-Za-z0-9_]*)*(\\(.*\\))?$", options: .regularExpression) != nil {
                let parts = name.split(separator: "(").first!.split(separator: ".").map(String.init)
                if !(folders.contains(parts[0]) || Self.declared(parts[0])) {
                    missing.append("the type or module \(parts[0]) (in `\(name)`)")
                    continue
                }
                for member in parts.dropFirst() where !Self.member(member) { missing.append("\(member) (in `\(name)`)") }
            }
        }
        #expect(missing.isEmpty, "docs/ARCHITECTURE.md names what the tree does not have: \(missing.joined(separator: "; "))")
    }

    /// Every relative link in the repository's documents (the README, BENCHMARKS, docs/)
    /// reaches a file or folder the repository has.
    @Test func everyDocumentLinksOnlyToWhatTheRepositoryHas() throws {
        let documents = ["README.md", "BENCHMARKS.md"] + Self.files(under: ["docs"]).filter { $0.hasSuffix(".md") }
        let link = try NSRegularExpression(pattern: "\\]\\(([^)\\s]+)\\)")
        var broken: [String] = []
        for document in documents {
            let text = try String(contentsOf: Self.root.appendingPathComponent(document), encoding: .utf8)
            let base = Self.root.appendingPathComponent(document).deletingLastPathComponent()
            for match in link.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                guard let range = Range(match.range(at: 1), in: text) else { continue }
                let target = String(text[range])
                if target.hasPrefix("#") || target.contains("://") || target.hasPrefix("mailto:") { continue }
                let path = String(target.split(separator: "#", maxSplits: 1).first ?? "")
                if !FileManager.default.fileExists(atPath: base.appendingPathComponent(path).standardizedFileURL.path) {
                    broken.append("\(document) → \(target)")
                }
            }
        }
        #expect(broken.isEmpty, "links to what the repository does not have: \(broken.joined(separator: "; "))")
    }

    /// The check itself can fail: a name nothing declares is caught.
    @Test func aNameNothingDeclaresIsCaught() {
        #expect(Self.declared("LegState"))
        #expect(!Self.declared("LegWork"))
        #expect(Self.member("handle") && !Self.member("noSuchMemberAnywhereHere"))
    }
}
