import Foundation
import Testing

/// The mutations `scripts/mutants/run` applies stay applicable as the code changes: each names a
/// file of the call's decisions and a text found there exactly once, changed into another.
@Suite struct MutationListTests {
    struct Mutation: Decodable {
        let id: String
        let file: String
        let kind: String
        let original: String
        let replacement: String
        let why: String
    }

    @Test func everyMutationStillAppliesOnceToTheCallsDecisions() throws {
        let list = ArchitectureDocTests.root.appendingPathComponent("scripts/mutants/mutations.json")
        let mutations = try JSONDecoder().decode([Mutation].self, from: Data(contentsOf: list))
        #expect(mutations.count >= 20)
        #expect(Set(mutations.map(\.id)).count == mutations.count, "ids repeat")
        #expect(Set(mutations.map(\.kind)).isSuperset(of: ["flip", "drop", "swap", "timer"]))
        for mutation in mutations {
            #expect(mutation.file.hasPrefix("Sources/CallCore/") || mutation.file.hasPrefix("Sources/SIPDialog/"), "\(mutation.id): \(mutation.file)")
            let text = try String(contentsOf: ArchitectureDocTests.root.appendingPathComponent(mutation.file), encoding: .utf8)
            #expect(text.components(separatedBy: mutation.original).count == 2,
                    "\(mutation.id): '\(mutation.original)' is not in \(mutation.file) exactly once: the code changed, so change the mutation")
            #expect(mutation.original != mutation.replacement && !mutation.why.isEmpty, "\(mutation.id)")
        }
    }
}
