import CallNodeTestSupport
import Foundation
import Testing

extension SimulatorTests {
    /// One command of the study guide and what it must print.
    struct GuideCommand: CustomStringConvertible {
        let arguments: [String]
        let expected: [String]
        var description: String { "callnode-sim " + arguments.joined(separator: " ") }
    }

    /// The `callnode-sim` commands of `docs/STUDYING.md`'s `sh` blocks, in order, each with the
    /// `# → TEXT` lines after it.
    static func guideCommands() throws -> [GuideCommand] {
        let guide = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/STUDYING.md")
        let text = try String(contentsOf: guide, encoding: .utf8)
        var commands: [GuideCommand] = []
        var inShell = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                inShell = !inShell && line == "```sh"
                continue
            }
            guard inShell else { continue }
            if line.hasPrefix("callnode-sim ") {
                commands.append(GuideCommand(arguments: line.dropFirst("callnode-sim ".count).split(separator: " ").map(String.init), expected: []))
            } else if line.hasPrefix("# → "), let last = commands.popLast() {
                commands.append(GuideCommand(arguments: last.arguments, expected: last.expected + [String(line.dropFirst("# → ".count))]))
            }
        }
        return commands
    }

    /// The study guide's commands run as a reader would run them, one after the other (a plan
    /// one saves, a later one reads), and each prints what the guide says it prints.
    @Test func everyCommandInTheStudyGuideDoesWhatItSays() async throws {
        let commands = try Self.guideCommands()
        #expect(commands.count >= 9, "\(commands)")
        #expect(commands.allSatisfy { !$0.expected.isEmpty }, "a command in the guide says nothing of what it prints")
        for command in commands {
            let (_, output) = try await Self.sim(command.arguments)
            for text in command.expected {
                #expect(output.contains(text), "\(command) did not print '\(text)':\n\(output.suffix(1_500))")
            }
        }
    }
}
