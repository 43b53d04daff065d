import CallCore
import Foundation
import GRDB
import Locking
import Logging

/// One row of Recents: a call this node placed or received.
///
/// Written when the call appears and updated as it connects and ends, each change committed
/// on its own, so a process that dies mid-call leaves the call's latest state on disk.
public struct RecentCall: Sendable, Equatable, Codable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "recents"

    public var id: UUID
    public var handle: String
    public var handleKind: String
    public var direction: CallDirection
    /// The last phase the call reached (`connected`, `ended(remoteEnded)`, …).
    public var state: String
    public var started: Date
    public var connected: Date?
    public var ended: Date?
    /// Seconds from connection to end; zero for calls that never connected.
    public var duration: Double?
    public var reason: CallEndReason?
    /// Where the call's own recording went (per-call audio), if it had one.
    public var recording: String?
    /// Why the recording stopped before the call did (a full disk), if it did.
    public var recordingProblem: String?
    /// When the node last knew the call was on (written while it is connected, every
    /// ``ProviderConfiguration/recentsHeartbeat``).
    public var lastSeen: Date?

    public init(id: UUID, handle: String, handleKind: String, direction: CallDirection, state: String, started: Date,
                connected: Date? = nil, ended: Date? = nil, duration: Double? = nil, reason: CallEndReason? = nil,
                recording: String? = nil) {
        self.recording = recording
        self.id = id
        self.handle = handle
        self.handleKind = handleKind
        self.direction = direction
        self.state = state
        self.started = started
        self.connected = connected
        self.ended = ended
        self.duration = duration
        self.reason = reason
    }

    /// Whether the call was still in progress when this row was last written.
    public var isInProgress: Bool { ended == nil }

    /// A row left in progress by a node that stopped without ending it (killed, a power cut):
    /// its last sign of life is older than `staleAfter` at `now`. Such a call lasted, as far as
    /// the node knew, ``knownDuration``.
    public func wasInterrupted(now: Date, staleAfter: TimeInterval = 30) -> Bool {
        guard ended == nil else { return false }
        return now.timeIntervalSince(lastSeen ?? started) > staleAfter
    }

    /// How long the call was connected: to its end, or to its last sign of life if it has
    /// none (nil if it never connected).
    public var knownDuration: Double? {
        if let duration { return duration }
        guard let connected else { return nil }
        return max(0, (ended ?? lastSeen ?? connected).timeIntervalSince(connected))
    }
}

extension CallDirection: DatabaseValueConvertible {}
extension CallEndReason: DatabaseValueConvertible {}

/// Why the store could not be opened or used.
public struct CallStoreError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// The node's SQLite database (WAL mode) for Recents and the call directory.
///
/// Writes from the call manager are queued in order on GRDB's writer and never wait on the
/// caller's thread; ``flush()`` waits for everything queued so far.
public final class CallStore: Sendable {
    let pool: DatabasePool
    let path: String
    private let watcher = Locked<StoreWatcher?>(nil)
    private let failedWrites = Locked<(count: Int, last: String?)>((0, nil))
    private let logger = Logger(label: "callnode.store")
    /// Blocking and identification entries, cached for synchronous checks of incoming calls.
    public let directory: CallDirectory
    /// Named peers: a name, the fingerprint that identifies the peer, and where to reach it.
    public let contacts: ContactBook

    /// Opens (creating if needed) the database at `path` and migrates it.
    ///
    /// Opening reads the file once, synchronously: do it at start-up.
    /// - Throws: ``CallStoreError`` naming the file and SQLite's message.
    public init(path: String) throws(CallStoreError) {
        self.path = path
        do {
            var configuration = Configuration()
            configuration.label = "callnode"
            // Another process (a second node on the same home, a CLI listing Recents) may hold
            // the write lock for a moment: wait rather than fail.
            configuration.busyMode = .timeout(5)
            pool = try DatabasePool(path: path, configuration: configuration)  // WAL journal mode
            var migrator = DatabaseMigrator()
            migrator.registerMigration("v1") { db in
                try db.create(table: "recents") { t in
                    t.primaryKey("id", .text)
                    t.column("handle", .text).notNull()
                    t.column("handleKind", .text).notNull()
                    t.column("direction", .text).notNull()
                    t.column("state", .text).notNull()
                    t.column("started", .datetime).notNull().indexed()
                    t.column("connected", .datetime)
                    t.column("ended", .datetime)
                    t.column("duration", .double)
                    t.column("reason", .text)
                }
                try db.create(table: "blocked") { t in
                    t.primaryKey("handle", .text)
                }
                try db.create(table: "identification") { t in
                    t.primaryKey("handle", .text)
                    t.column("label", .text).notNull()
                }
            }
            migrator.registerMigration("v2-contacts") { db in
                try db.create(table: "contacts") { t in
                    t.primaryKey("name", .text)
                    t.column("fingerprint", .text).notNull().indexed()
                    t.column("address", .text)
                }
            }
            migrator.registerMigration("v3-recordings") { db in
                try db.alter(table: "recents") { t in t.add(column: "recording", .text) }
            }
            migrator.registerMigration("v4-recording-problems") { db in
                try db.alter(table: "recents") { t in t.add(column: "recordingProblem", .text) }
            }
            migrator.registerMigration("v5-last-seen") { db in
                try db.alter(table: "recents") { t in t.add(column: "lastSeen", .datetime) }
            }
            migrator.registerMigration("v6-quality") { db in
                try db.create(table: "quality") { t in
                    t.primaryKey("id", .text)
                    t.column("timeline", .blob).notNull()
                }
            }
            try migrator.migrate(pool)
            let blocked = try pool.read { db in try String.fetchSet(db, sql: "SELECT handle FROM blocked") }
            let labels = try pool.read { db in
                try Row.fetchAll(db, sql: "SELECT handle, label FROM identification")
                    .reduce(into: [String: String]()) { $0[$1["handle"]] = $1["label"] }
            }
            directory = CallDirectory(pool: pool, blocked: blocked, labels: labels)
            contacts = ContactBook(pool: pool, directory: directory,
                                   contacts: try pool.read { db in try Contact.order(Column("name")).fetchAll(db) })
        } catch {
            throw CallStoreError(message: "cannot open the call database at \(path): \(error)")
        }
    }

    /// Keeps the contacts and blocks in step with other processes' changes to the same
    /// database (the command line's `contacts add`, `block`), at once: a watcher thread sees
    /// each write to the file and reloads both. Idempotent; ``stopWatching()`` ends it.
    public func watchForChanges() {
        watcher.withLock { watcher in
            guard watcher == nil else { return }
            watcher = StoreWatcher(path: path) { [weak self] in self?.reload() }
        }
    }

    /// Stops following other processes' changes.
    public func stopWatching() {
        watcher.withLock { watcher in
            watcher?.stop()
            watcher = nil
        }
    }

    /// Reads contacts, blocks and labels again from the database (the truth; the caches follow).
    ///
    /// It reads and replaces the caches on the database's writer queue, the queue this
    /// process's own changes commit and update the caches on (`commit(_:then:)`): a reload
    /// read on a reader could take a snapshot from before a contact was added and replace the
    /// cache after the add had put it there, and the contact just added would be missing until
    /// the next change.
    public func reload() {
        do {
            try pool.write { db in
                let blocked = try String.fetchSet(db, sql: "SELECT handle FROM blocked")
                let labels = try Row.fetchAll(db, sql: "SELECT handle, label FROM identification")
                    .reduce(into: [String: String]()) { $0[$1["handle"]] = $1["label"] }
                let contacts = try Contact.order(Column("name")).fetchAll(db)
                directory.replace(blocked: blocked, labels: labels)
                self.contacts.replace(contacts)
            }
        } catch {
            // A busy or half-written moment: the next change triggers another reload.
        }
    }

    deinit { stopWatching() }

    /// The journal mode SQLite reports (`wal`).
    public func journalMode() async throws -> String {
        try await pool.read { db in try String.fetchOne(db, sql: "PRAGMA journal_mode") ?? "" }
    }

    /// Queues an insert-or-replace of `row`.
    func save(_ row: RecentCall) {
        enqueue("the Recents row of call \(row.id)") { db in try row.insert(db, onConflict: .replace) }
    }

    /// How many queued writes failed for good, and the last one's reason (nil: none has).
    public var writeFailures: (count: Int, last: String?) { failedWrites.withLock { $0 } }

    /// Queues `change` in a transaction of its own, in order with every other write. Nobody
    /// waits for it, so nobody would see it fail: a moment of contention (another process
    /// holding the lock past the busy timeout, SQLite's WAL-index retries running out on a busy
    /// host) is retried on the writer's queue, where later writes wait behind it and so cannot
    /// overtake it; a write that still fails is counted (``writeFailures``) and logged.
    func enqueue(_ what: String, _ change: @escaping @Sendable (Database) throws -> Void) {
        pool.asyncWriteWithoutTransaction { [failedWrites, logger] db in
            var attempt = 1
            while true {
                do {
                    try db.inTransaction {
                        try change(db)
                        return .commit
                    }
                    return
                } catch let error as DatabaseError where attempt < 4 && Self.passes(error) {
                    usleep(UInt32(20_000 * attempt))  // GRDB's writer queue, not the cooperative pool
                    attempt += 1
                } catch {
                    failedWrites.withLock { $0 = ($0.count + 1, "\(what): \(error)") }
                    logger.error("could not keep \(what) in the call database: \(error)")
                    return
                }
            }
        }
    }

    /// Whether `error` is a moment's contention rather than a lasting fault.
    static func passes(_ error: DatabaseError) -> Bool {
        [.SQLITE_BUSY, .SQLITE_LOCKED, .SQLITE_PROTOCOL].contains(error.resultCode)
    }

    /// Every Recents row, newest first.
    public func recents(limit: Int = 500) async throws -> [RecentCall] {
        try await pool.read { db in
            try RecentCall.order(Column("started").desc).limit(limit).fetchAll(db)
        }
    }

    /// Deletes every Recents row.
    public func clearRecents() async throws {
        try await pool.write { db in
            _ = try RecentCall.deleteAll(db)
            try db.execute(sql: "DELETE FROM quality")
        }
    }

    /// Waits until every queued write is done (committed, or failed for good: see
    /// ``writeFailures``). It starts no transaction of its own, so it cannot meet a lock.
    public func flush() async throws {
        try await pool.writeWithoutTransaction { _ in }
    }
}

/// Blocked handles and caller identification labels (CallKit's call directory), persisted in
/// the store and cached in memory.
public final class CallDirectory: Sendable {
    private let pool: DatabasePool
    private let cache: Locked<(blocked: Set<String>, labels: [String: String])>

    init(pool: DatabasePool, blocked: Set<String>, labels: [String: String]) {
        self.pool = pool
        cache = Locked((blocked, labels))
    }

    func replace(blocked: Set<String>, labels: [String: String]) {
        cache.withLock { $0 = (blocked, labels) }
    }

    public func isBlocked(_ handle: CallHandle) -> Bool { cache.withLock { $0.blocked.contains(handle.value) } }
    public func label(for handle: CallHandle) -> String? { cache.withLock { $0.labels[handle.value] } }
    public var blockedHandles: Set<String> { cache.withLock { $0.blocked } }

    /// Blocks `handle`: its incoming calls fail with ``IncomingCallError/filteredByBlockList``.
    public func block(_ handle: CallHandle) async throws {
        try await pool.commit { db in
            try db.execute(sql: "INSERT OR IGNORE INTO blocked(handle) VALUES (?)", arguments: [handle.value])
        } then: { [cache] in
            _ = cache.withLock { $0.blocked.insert(handle.value) }
        }
    }

    public func unblock(_ handle: CallHandle) async throws {
        try await pool.commit { db in
            try db.execute(sql: "DELETE FROM blocked WHERE handle = ?", arguments: [handle.value])
        } then: { [cache] in
            _ = cache.withLock { $0.blocked.remove(handle.value) }
        }
    }

    /// Sets the name shown for calls from `handle` (or removes it with `nil`).
    public func setLabel(_ label: String?, for handle: CallHandle) async throws {
        try await pool.commit { db in
            if let label {
                try db.execute(sql: "INSERT OR REPLACE INTO identification(handle, label) VALUES (?, ?)",
                               arguments: [handle.value, label])
            } else {
                try db.execute(sql: "DELETE FROM identification WHERE handle = ?", arguments: [handle.value])
            }
        } then: { [cache] in
            cache.withLock { $0.labels[handle.value] = label }
        }
    }
}

/// A known peer: the name a user dials, the identity (certificate fingerprint) that proves the
/// peer, and optionally where it listens (`HOST:PORT`).
public struct Contact: Sendable, Equatable, Codable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "contacts"
    public var name: String
    /// 64 hex digits: the peer's certificate fingerprint.
    public var fingerprint: String
    /// `HOST:PORT` of the peer's signaling listener, if known.
    public var address: String?

    public init(name: String, fingerprint: String, address: String? = nil) {
        self.name = name
        self.fingerprint = fingerprint
        self.address = address
    }
}

/// The node's contacts, persisted in the store and cached for synchronous lookups. A contact's
/// name is also the caller label shown for its fingerprint.
public final class ContactBook: Sendable {
    private let pool: DatabasePool
    private let directory: CallDirectory
    private let cache: Locked<[Contact]>

    init(pool: DatabasePool, directory: CallDirectory, contacts: [Contact]) {
        self.pool = pool
        self.directory = directory
        cache = Locked(contacts)
    }

    /// Every contact, by name.
    public var all: [Contact] { cache.withLock { $0 } }

    func replace(_ contacts: [Contact]) {
        cache.withLock { $0 = contacts }
    }

    /// The contact called `name`.
    public func named(_ name: String) -> Contact? { cache.withLock { $0.first { $0.name == name } } }

    /// The contact with this fingerprint (64 lowercase hex digits).
    public func withFingerprint(_ fingerprint: String) -> Contact? {
        cache.withLock { $0.first { $0.fingerprint == fingerprint } }
    }

    /// Adds or replaces the contact with `contact.name`.
    public func add(_ contact: Contact) async throws {
        try await pool.commit { db in try contact.insert(db, onConflict: .replace) } then: { [cache] in
            cache.withLock { contacts in
                contacts.removeAll { $0.name == contact.name }
                contacts.append(contact)
                contacts.sort { $0.name < $1.name }
            }
        }
        try await directory.setLabel(contact.name, for: CallHandle(.generic, contact.fingerprint))
    }

    /// Removes the contact called `name`; returns whether there was one.
    @discardableResult
    public func remove(named name: String) async throws -> Bool {
        guard let contact = named(name) else { return false }
        try await pool.commit { db in _ = try Contact.deleteOne(db, key: name) } then: { [cache] in
            cache.withLock { $0.removeAll { $0.name == name } }
        }
        try await directory.setLabel(nil, for: CallHandle(.generic, contact.fingerprint))
        return true
    }
}

extension DatabasePool {
    /// Commits `changes` in a transaction, then runs `apply` (the in-memory caches' matching
    /// change) still on the writer queue: caches change in the order the database does, and
    /// `CallStore.reload()`, which replaces them on the same queue, never lands between the
    /// commit and its cache update.
    func commit(_ changes: @escaping @Sendable (Database) throws -> Void,
                then apply: @escaping @Sendable () -> Void) async throws {
        try await writeWithoutTransaction { db in
            try db.inTransaction {
                try changes(db)
                return .commit
            }
            apply()
        }
    }
}
