import Foundation
import Testing

/// `Package.swift` declares exactly what each Swift module imports: no dependency a module does
/// not import (it would link and build what nothing uses), and no import of a module of this
/// package or of a package dependency that is not declared (it would compile only through
/// another module's dependency, and break when that one changes).
@Suite struct PackageManifestTests {
    static let root = ArchitectureDocTests.root

    /// A target of the manifest: its name, kind, sources and declared dependencies (targets by
    /// name, products by their module's name).
    struct Target {
        var name: String
        var kind: String
        var path: String
        var dependencies: Set<String>
    }

    /// The targets of `manifest`, read from its text: each `.target(`, `.executableTarget(`,
    /// `.testTarget(` or `.systemLibrary(` up to its closing parenthesis.
    static func targets(in manifest: String) throws -> [Target] {
        let start = try NSRegularExpression(pattern: #"\.(target|executableTarget|testTarget|systemLibrary)\("#)
        let text = manifest as NSString
        var found: [Target] = []
        for match in start.matches(in: manifest, range: NSRange(location: 0, length: text.length)) {
            // The call's text: to the parenthesis that closes it.
            var depth = 0, end = match.range.location + match.range.length - 1
            while end < text.length {
                let character = text.character(at: end)
                if character == 0x28 { depth += 1 } else if character == 0x29 { depth -= 1; if depth == 0 { break } }
                end += 1
            }
            let body = text.substring(with: NSRange(location: match.range.location, length: end - match.range.location + 1))
            let kind = text.substring(with: match.range(at: 1))
            guard let name = first(#"name:\s*"([^"]+)""#, in: body) else { continue }
            let path = first(#"path:\s*"([^"]+)""#, in: body) ?? (kind == "testTarget" ? "Tests/" : "Sources/") + name
            var dependencies = Set<String>()
            if let list = first(#"dependencies:\s*\[([\s\S]*?)\]\s*(?:,\s*(?:path|exclude|resources|swiftSettings|linkerSettings|cSettings|plugins)|\)\s*$)"#, in: body) {
                // Products: `.product(name: "X", package: …)` is module X; targets: plain strings.
                let products = all(#"\.product\(\s*name:\s*"([^"]+)""#, in: list)
                let withoutProducts = list.replacingOccurrences(of: #"\.product\([^)]*\)"#, with: "", options: .regularExpression)
                dependencies = Set(products + all(#""([^"]+)""#, in: withoutProducts))
            }
            found.append(Target(name: name, kind: kind, path: path, dependencies: dependencies))
        }
        return found
    }

    static func first(_ pattern: String, in text: String) -> String? { all(pattern, in: text).first }

    static func all(_ pattern: String, in text: String) -> [String] {
        guard let expression = try? NSRegularExpression(pattern: pattern) else { return [] }
        return expression.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap {
            Range($0.range(at: 1), in: text).map { String(text[$0]) }
        }
    }

    /// The modules the Swift files under `path` import (any access level, attributes, kinds).
    static func imports(under path: String) -> Set<String> {
        let pattern = #"(?m)^\s*(?:@[\w()]+\s+)*(?:(?:public|internal|package|private|fileprivate)\s+)?import\s+(?:(?:struct|class|enum|protocol|func|var|let|typealias)\s+)?([A-Za-z_][A-Za-z0-9_]*)"#
        let files = ArchitectureDocTests.files(under: [path]).filter { $0.hasSuffix(".swift") }
        return Set(files.flatMap { file -> [String] in
            guard let text = try? String(contentsOf: root.appendingPathComponent(file), encoding: .utf8) else { return [] }
            return all(pattern, in: text)
        })
    }

    /// Modules of the toolchain and the system, which nothing declares.
    static let system: Set<String> = ["Foundation", "FoundationEssentials", "Glibc", "Musl", "Darwin", "Dispatch", "Synchronization",
                                      "Testing", "XCTest", "_Concurrency", "CoreFoundation", "FoundationXML"]

    @Test func everyModuleDeclaresExactlyWhatItImports() throws {
        let manifest = try String(contentsOf: Self.root.appendingPathComponent("Package.swift"), encoding: .utf8)
        let targets = try Self.targets(in: manifest)
        #expect(targets.count > 20, "the manifest's targets were not read: \(targets.map(\.name))")
        // Every module a package dependency gives, as some target of this package declares it.
        let known = Set(targets.map(\.name)).union(targets.flatMap(\.dependencies))
        var wrong: [String] = []
        for target in targets where target.kind != "systemLibrary" {
            let imported = Self.imports(under: target.path).subtracting(Self.system).subtracting([target.name])
            guard !ArchitectureDocTests.files(under: [target.path]).filter({ $0.hasSuffix(".swift") }).isEmpty else { continue }  // a C target
            let unused = target.dependencies.subtracting(imported)
            let undeclared = imported.intersection(known).subtracting(target.dependencies)
            if !unused.isEmpty { wrong.append("\(target.name) declares but does not import \(unused.sorted())") }
            if !undeclared.isEmpty { wrong.append("\(target.name) imports but does not declare \(undeclared.sorted())") }
        }
        #expect(wrong.isEmpty, "Package.swift and the imports disagree: \(wrong.joined(separator: "; "))")
    }

    /// Everything `name` builds on, directly or through other targets of the manifest.
    static func closure(of name: String, in targets: [Target]) -> Set<String> {
        let byName = Dictionary(targets.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        var seen = Set<String>(), pending = [name]
        while let next = pending.popLast() {
            for dependency in byName[next]?.dependencies ?? [] where seen.insert(dependency).inserted {
                pending.append(dependency)
            }
        }
        return seen
    }

    /// The CallKit model (`import Calls`: the manager, the audio session, Recents) links no
    /// codec, no SRTP and no OpenSSL: an embedder who wants the call model alone does not carry
    /// the media pipeline. Voice processing and the media clock come from their own modules.
    @Test func theCallModelLinksNoCodecNorTheMediaPipeline() throws {
        let manifest = try String(contentsOf: Self.root.appendingPathComponent("Package.swift"), encoding: .utf8)
        let targets = try Self.targets(in: manifest)
        let calls = Self.closure(of: "Calls", in: targets)
        #expect(calls.contains("AudioSession") && calls.contains("CallCore"), "Calls' dependencies were not read: \(calls.sorted())")
        let media: Set<String> = ["COpus", "AudioCodec", "Media", "CSRTP", "CSRTPOpenSSL", "CSSL", "FrameCrypto", "ICE", "CNice"]
        #expect(calls.isDisjoint(with: media), "import Calls pulls in \(calls.intersection(media).sorted())")
        // And the pipeline does link them, so the check above reads the graph it means to.
        #expect(Self.closure(of: "Media", in: targets).isSuperset(of: ["COpus", "CSRTP"]))
    }

    /// The manifest reader finds what a target declares, products by their module.
    @Test func theManifestReaderReadsATargetsDependencies() throws {
        let manifest = """
            .target(name: "A", dependencies: ["B", .product(name: "NIOCore", package: "swift-nio")], path: "Sources/X"),
            .testTarget(name: "ATests", dependencies: ["A"]),
            .systemLibrary(name: "CLib", pkgConfig: "lib"),
            """
        let targets = try Self.targets(in: manifest)
        #expect(targets.map(\.name) == ["A", "ATests", "CLib"])
        #expect(targets[0].dependencies == ["B", "NIOCore"] && targets[0].path == "Sources/X")
        #expect(targets[1].dependencies == ["A"] && targets[1].path == "Tests/ATests")
        #expect(targets[2].dependencies.isEmpty)
    }
}
