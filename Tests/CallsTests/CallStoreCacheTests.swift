import Foundation
import Synchronization
import Testing
@testable import Calls

/// The store's in-memory caches (contacts, blocks, labels) against reloads: a node watching its
/// database reloads the caches whenever the file changes, from its own writes too.
@Suite struct CallStoreCacheTests {
    /// A store in a new temporary directory (remove the directory when done).
    static func temporaryStore() throws -> (CallStore, String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return (try CallStore(path: directory + "/node.sqlite"), directory)
    }

    /// A contact, block or label this process has just written is in the cache when the write
    /// returns, though reloads run all the while on another thread. (A reload that read the
    /// database before the write and replaced the cache after it once left a test's contact
    /// missing: "no contact named 'bob'".)
    @Test func whatThisProcessWroteIsCachedThoughReloadsRunBeside() async throws {
        let (store, directory) = try Self.temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let stop = ManagedFlag()
        let reloading = Thread {
            while !stop.isSet { store.reload() }
            stop.finish()
        }
        reloading.start()
        var missing: [String] = []
        for i in 0..<150 {
            let name = "peer-\(i)", fingerprint = String(repeating: String(i % 10), count: 64)
            try await store.contacts.add(Contact(name: name, fingerprint: fingerprint))
            if store.contacts.named(name) == nil { missing.append("contact \(name)") }
            let handle = CallHandle(.generic, name)
            try await store.directory.block(handle)
            if !store.directory.isBlocked(handle) { missing.append("block \(name)") }
            try await store.directory.unblock(handle)
            if store.directory.isBlocked(handle) { missing.append("unblock \(name)") }
            try await store.directory.setLabel("Peer \(i)", for: handle)
            if store.directory.label(for: handle) != "Peer \(i)" { missing.append("label \(name)") }
            try await store.contacts.remove(named: name)
            if store.contacts.named(name) != nil { missing.append("removal \(name)") }
        }
        await stop.stopAndWait()
        #expect(missing.isEmpty, "changes not in the cache when they returned: \(missing.prefix(10))")
        // The caches agree with the database.
        store.reload()
        #expect(store.contacts.all.map(\.name) == [], "removed contacts still in the database")
        #expect(store.directory.label(for: CallHandle(.generic, "peer-149")) == "Peer 149")
    }

    /// Another process's change (another store on the same file) reaches a watching store's
    /// caches without anything else happening.
    @Test func anotherWritersContactReachesAWatchingStore() async throws {
        let (store, directory) = try Self.temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        store.watchForChanges()
        defer { store.stopWatching() }
        let other = try CallStore(path: directory + "/node.sqlite")
        try await other.contacts.add(Contact(name: "carol", fingerprint: String(repeating: "c", count: 64)))
        try await other.directory.block(CallHandle(.generic, "mallory"))
        // Bounded wait for the watcher thread to see the file change (10 s).
        for _ in 0..<1_000 where store.contacts.named("carol") == nil || !store.directory.isBlocked(CallHandle(.generic, "mallory")) {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(store.contacts.named("carol")?.fingerprint == String(repeating: "c", count: 64))
        #expect(store.directory.isBlocked(CallHandle(.generic, "mallory")))
    }

    /// A host out of inotify instances (a per-user limit, 128 by default, that every process of
    /// the user shares) still sees another writer's change: the watcher looks at the files.
    @Test func withoutInotifyAnotherWritersChangeIsSeenByLookingAtTheFiles() async throws {
        let (store, directory) = try Self.temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let seen = Atomic<Int>(0)
        let watcher = try #require(StoreWatcher(path: directory + "/node.sqlite", inotify: false) { seen.add(1, ordering: .relaxed) })
        defer { watcher.stop() }
        try await Task.sleep(for: .milliseconds(Int64(StoreWatcher.pollInterval) * 2))
        #expect(seen.load(ordering: .relaxed) == 0, "a change seen where there was none")
        let other = try CallStore(path: directory + "/node.sqlite")
        try await other.contacts.add(Contact(name: "carol", fingerprint: String(repeating: "c", count: 64)))
        for _ in 0..<500 where seen.load(ordering: .relaxed) == 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(seen.load(ordering: .relaxed) >= 1, "the other writer's change was not seen")
        _ = store
    }
}

/// A stop flag for a plain thread, and a wait for it to have stopped.
private final class ManagedFlag: Sendable {
    private let stopping = Atomic(false), finished = Atomic(false)
    var isSet: Bool { stopping.load(ordering: .acquiring) }
    func finish() { finished.store(true, ordering: .releasing) }
    func stopAndWait() async {
        stopping.store(true, ordering: .releasing)
        while !finished.load(ordering: .acquiring) { try? await Task.sleep(for: .milliseconds(5)) }
    }
}
