import Foundation
import Testing

/// The source tree stays findable by name: a folder that grows past what a newcomer reads in one
/// sitting is split into rooms (subfolders or modules) by responsibility.
@Suite struct LayoutTests {
    /// Lines of code a folder may hold in its own files (its subfolders not counted).
    static let limit = 2_600

    /// Each folder under `Sources` with the lines of the source files directly in it.
    static func linesPerFolder() -> [String: Int] {
        var lines: [String: Int] = [:]
        for path in ArchitectureDocTests.files(under: ["Sources"]) where [".swift", ".c", ".h"].contains(where: path.hasSuffix) {
            let folder = (path as NSString).deletingLastPathComponent
            let text = (try? String(contentsOf: ArchitectureDocTests.root.appendingPathComponent(path), encoding: .utf8)) ?? ""
            lines[folder, default: 0] += text.split(separator: "\n", omittingEmptySubsequences: false).count
        }
        return lines
    }

    @Test func noFolderOfSourcesHoldsMoreThanItsShareWithoutRooms() {
        let lines = Self.linesPerFolder()
        #expect(lines.count > 20 && lines["Sources/CallCore", default: 0] > 500, "the tree was not read: \(lines)")
        let crowded = lines.filter { $0.value > Self.limit }.sorted { $0.key < $1.key }
        #expect(crowded.isEmpty, "split these folders into rooms by responsibility: \(crowded.map { "\($0.key) (\($0.value) lines)" })")
    }
}
