import ArgumentParser
import CallNode
import Foundation
import NodeControl

/// Opens the database of a node that exists, for commands that only read it; `nil` (nothing
/// created) when `home` holds no node yet.
func openExistingStore(_ home: String) throws -> CallStore? {
    guard FileManager.default.fileExists(atPath: home + "/callnode.sqlite") else { return nil }
    return try openStore(home)
}

/// Opens the node's database (and identity) without starting anything.
func openStore(_ home: String) throws -> CallStore {
    do {
        _ = try NodeIdentity.loadOrCreate(home: home)
        return try CallStore(path: home + "/callnode.sqlite")
    } catch {
        printError("callnode: \(error)")
        throw ExitCode(1)
    }
}

struct Identity: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show this node's identity (creating it on first use).",
        discussion: "Prints the SHA-256 fingerprint of the node's certificate: give it to the people who will call you.")

    @OptionGroup var home: HomeOption

    func run() async throws {
        do {
            let (identity, created) = try NodeIdentity.loadOrCreate(home: home.home)
            if created { printError("callnode: created a new identity in \(home.home)") }
            print(identity.fingerprint.hex)
        } catch {
            printError("callnode: \(error)")
            throw ExitCode(1)
        }
    }
}

struct Contacts: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage contacts: names for the fingerprints that may call you and that you call.",
        subcommands: [Add.self, List.self, Show.self, Remove.self], defaultSubcommand: List.self)

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add or replace a contact.")
        @OptionGroup var home: HomeOption
        @Argument(help: "The name to call the contact by.") var name: String
        @Argument(help: "The contact's fingerprint (callnode identity on their machine).") var fingerprint: String
        @Argument(help: ArgumentHelp("Where the contact listens.", valueName: "HOST:PORT")) var address: String?

        func validate() throws {
            guard Fingerprint(fingerprint) != nil else { throw ValidationError("'\(fingerprint)' is not a SHA-256 fingerprint (64 hex digits)") }
            if let address, SignalAddress(address) == nil { throw ValidationError("'\(address)' is not HOST:PORT") }
            guard !name.isEmpty, SignalAddress(name) == nil, !name.contains("@") else {
                throw ValidationError("a contact name must not look like an address")
            }
        }

        func run() async throws {
            let store = try openStore(home.home)
            // Checked in validate().
            let hex = Fingerprint(fingerprint)!.hex
            try await store.contacts.add(Contact(name: name, fingerprint: hex, address: address))
            print("added \(name)")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List contacts.")
        @OptionGroup var home: HomeOption
        func run() async throws {
            guard let store = try openExistingStore(home.home) else {
                print("no contacts (no node in \(home.home) yet; add one with: callnode contacts add NAME FINGERPRINT [HOST:PORT])")
                return
            }
            let contacts = store.contacts.all
            if contacts.isEmpty { print("no contacts (add one with: callnode contacts add NAME FINGERPRINT [HOST:PORT])") }
            for contact in contacts {
                let blocked = store.directory.isBlocked(CallHandle(.generic, contact.fingerprint)) ? "  [blocked]" : ""
                print("\(contact.name)\t\(contact.fingerprint)\t\(contact.address ?? "-")\(blocked)")
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a contact and the security code of calls with it.",
            discussion: "The security code comes from both identities: on a call, both sides show the same 12 digits; read them aloud to check that nobody sits between you.")
        @OptionGroup var home: HomeOption
        @Argument(help: "The contact's name.") var name: String
        func run() async throws {
            guard let store = try openExistingStore(home.home), let contact = store.contacts.named(name),
                  let theirs = Fingerprint(contact.fingerprint) else {
                printError("callnode: no contact named '\(name)' (see callnode contacts list)")
                throw ExitCode(1)
            }
            let ours: NodeIdentity
            do { ours = try NodeIdentity.loadOrCreate(home: home.home).identity } catch {
                printError("callnode: \(error)")
                throw ExitCode(1)
            }
            let blocked = store.directory.isBlocked(CallHandle(.generic, contact.fingerprint))
            print("name:          \(contact.name)")
            print("fingerprint:   \(contact.fingerprint)")
            print("address:       \(contact.address ?? "-")")
            print("blocked:       \(blocked ? "yes" : "no")")
            print("security code: \(SecurityCode.between(ours.fingerprint, theirs))")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove a contact.")
        @OptionGroup var home: HomeOption
        @Argument var name: String
        func run() async throws {
            let store = try openStore(home.home)
            guard try await store.contacts.remove(named: name) else {
                printError("callnode: no contact named '\(name)'")
                throw ExitCode(1)
            }
            print("removed \(name)")
        }
    }
}

/// Resolves a contact name or a fingerprint to the fingerprint to block.
func fingerprint(forContactOrFingerprint text: String, in store: CallStore) throws -> String {
    if let contact = store.contacts.named(text) { return contact.fingerprint }
    if let fingerprint = Fingerprint(text) { return fingerprint.hex }
    printError("callnode: '\(text)' is neither a contact nor a fingerprint")
    throw ExitCode(1)
}

struct Block: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Block a contact or fingerprint: their calls are rejected as blocked.")
    @OptionGroup var home: HomeOption
    @Argument(help: "Contact name or fingerprint.") var who: String
    func run() async throws {
        let store = try openStore(home.home)
        let hex = try fingerprint(forContactOrFingerprint: who, in: store)
        try await store.directory.block(CallHandle(.generic, hex))
        print("blocked \(hex)")
    }
}

struct Unblock: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Unblock a contact or fingerprint.")
    @OptionGroup var home: HomeOption
    @Argument(help: "Contact name or fingerprint.") var who: String
    func run() async throws {
        let store = try openStore(home.home)
        let hex = try fingerprint(forContactOrFingerprint: who, in: store)
        try await store.directory.unblock(CallHandle(.generic, hex))
        print("unblocked \(hex)")
    }
}

struct Recents: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List recent calls, newest first; `recents show N` tells one call's quality over time.",
        subcommands: [RecentsList.self, RecentsShow.self], defaultSubcommand: RecentsList.self)
}

struct RecentsShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "One recent call: its row, and its quality over time with its worst moments.")
    @OptionGroup var home: HomeOption
    @Argument(help: "Which call: its place in `callnode recents` (1: the newest), or the start of its ID.") var which: String
    @Option(name: .long, help: "Also draw the call's quality over time as an SVG image at PATH (…/call.svg).") var plot: String?

    func validate() throws {
        if let plot, !plot.lowercased().hasSuffix(".svg") { throw ValidationError("--plot writes SVG: give a PATH ending in .svg (got \(plot))") }
    }

    func run() async throws {
        guard let store = try openExistingStore(home.home) else { throw ValidationError("no recent calls (no node in \(home.home) yet)") }
        let rows = try await store.recents(limit: 500)
        let row: RecentCall
        if let index = Int(which) {
            guard index >= 1, index <= rows.count else {
                throw ValidationError(rows.count == 1 ? "there is one recent call: \(which) is not 1"
                                      : "there are \(rows.count) recent calls: \(which) is not one of 1–\(rows.count)")
            }
            row = rows[index - 1]
        } else {
            switch IDPrefixMatch(which, in: rows, id: \.id) {
            case let .one(only): row = only
            case .none: throw ValidationError("no recent call's ID starts with \(which)")
            case let .several(count): throw ValidationError("\(count) recent calls' IDs start with \(which): give more of it")
            }
        }
        let who = store.contacts.withFingerprint(row.handle)?.name ?? row.handle
        let duration = row.knownDuration.map { String(format: "%.1f s", $0) } ?? "-"
        print("\(ISO8601DateFormatter().string(from: row.started))  \(row.direction.rawValue)  \(who)  \(row.reason?.rawValue ?? row.state)  \(duration)")
        print("call \(row.id.uuidString)")
        let timeline = try await store.quality(of: row.id) ?? QualityTimeline()
        for line in QualitySummary.lines(timeline) { print(line) }
        if let plot {
            guard !timeline.samples.isEmpty else { throw ValidationError("nothing to plot: the call kept no quality (it had no media)") }
            let title = "\(row.direction.rawValue) call with \(who), \(ISO8601DateFormatter().string(from: row.started))"
            try Data(QualityPlot.svg(timeline, title: title).utf8).write(to: URL(fileURLWithPath: plot))
            print("quality over time drawn in \(plot)")
        }
    }
}

struct RecentsList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List recent calls, newest first.")
    @OptionGroup var home: HomeOption
    @Option(name: .long, help: "How many to show.") var limit = 20
    @Flag(name: .long, help: "Delete every recent call.") var clear = false

    func run() async throws {
        guard let store = try openExistingStore(home.home) else {
            print(clear ? "recents cleared (no node in \(home.home) yet)" : "no recent calls (no node in \(home.home) yet)")
            return
        }
        if clear {
            try await store.clearRecents()
            print("recents cleared")
            return
        }
        let rows = try await store.recents(limit: limit)
        if rows.isEmpty { print("no recent calls") }
        let formatter = ISO8601DateFormatter()
        let now = Date()
        for row in rows {
            let who = store.contacts.withFingerprint(row.handle)?.name ?? row.handle
            // A call its node never ended (killed, a power cut) lasted as long as the node knew.
            let interrupted = row.wasInterrupted(now: now)
            let duration = row.knownDuration.map { String(format: interrupted ? "≥%.1f s" : "%.1f s", $0) } ?? "-"
            let recording = row.recording.map { "\t\($0)" + (row.recordingProblem == nil ? "" : " (incomplete)") } ?? ""
            let outcome = RecentOutcome.word(row, now: now)
            print("\(formatter.string(from: row.started))  \(row.direction.rawValue)\t\(who)\t\(outcome)\t\(duration)\(recording)")
        }
    }
}

struct Devices: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the ALSA devices usable with --input alsa:DEVICE and --output alsa:DEVICE.")
    func run() async throws {
        let routes = ALSADeviceBackend.deviceHints()
        if routes.isEmpty { print("ALSA reports no PCM devices") }
        for route in routes {
            let kind = route.isInput && route.isOutput ? "in/out" : route.isInput ? "in" : "out"
            print("\(route.name)\t\(kind)\t\(route.label.replacingOccurrences(of: "\n", with: " — "))")
        }
    }
}
