import ArgumentParser
import CallNode
import NodeSettings

#if canImport(Glibc)
import Glibc
#endif

@main
struct CallNodeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "callnode",
        abstract: "A peer-to-peer audio call node: ICE (libnice), SRTP, Opus and ALSA.",
        version: CallNodeVersion.string,
        subcommands: [Demo.self, Listen.self, Call.self, Web.self, Relay.self, Session.self, Config.self, Join.self, Identity.self, Contacts.self, Block.self, Unblock.self, Recents.self, Devices.self, Gather.self, Ctl.self])

    /// ArgumentParser's own, except for a usage error found while a command runs (a value
    /// from config.yaml, a WAV that cannot be played, two options that exclude each other):
    /// that one is printed with the command's help to read, not with the top command's usage.
    static func main() async {
        let command: any ParsableCommand
        do {
            command = try parseAsRoot()
        } catch {
            exit(withError: error)
        }
        do {
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                var command = command
                try command.run()
            }
            leave(0)
        } catch let error as ValidationError {
            var path = ["callnode"], level: any ParsableCommand.Type = CallNodeCommand.self
            for word in CommandLine.arguments.dropFirst() {
                guard let next = level.configuration.subcommands.first(where: { $0._commandName == word }) else { break }
                path.append(word)
                level = next
            }
            printError("Error: \(error.message)")
            printError("See '\(path.joined(separator: " ")) --help'.")
            leave(ExitCode.validationFailure.rawValue)
        } catch {
            let message = fullMessage(for: error)
            if !message.isEmpty { printError(message) }
            leave(exitCode(for: error).rawValue)
        }
    }

    /// Ends the process once a command is done, without running exit handlers: libraries' own
    /// threads (GLib's loop and resolver threads, libnice's, a late libsrtp start) can still be
    /// running, and exit handlers and thread-local destructors that pull their state from under
    /// them crashed a process that had finished its call (seen once as an exit by a signal after
    /// a clean `ended`). What must outlive the process is written by then: recordings and the
    /// database are closed by the node's shutdown, and standard output is flushed here.
    static func leave(_ code: Int32) -> Never {
        fflush(nil)
        _exit(code)
    }
}

/// Options that describe how ICE reaches the network, shared by every command that uses it.
struct NetworkOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("STUN server for server-reflexive candidates.", valueName: "HOST:PORT"))
    var stun: String?

    @Option(name: .long, help: ArgumentHelp(
        "TURN server with long-term credentials; repeat for several. A secret: better in config.yaml, CALLNODE_TURN or --turn-file than on the command line.",
        valueName: "USER:PASS@HOST:PORT[?transport=tcp]"))
    var turn: [String] = []

    @Option(name: .long, help: ArgumentHelp("Read TURN servers from this file, one USER:PASS@HOST:PORT[?transport=tcp] per line (# comments).", valueName: "PATH"))
    var turnFile: String?

    @Flag(name: .long, inversion: .prefixedNo, help: "Use relayed candidates only (needs --turn); hides local addresses.")
    var relayOnly: Bool?

    @Option(name: .long, help: ArgumentHelp("Gather host candidates only on this address; repeat for several.", valueName: "ADDRESS"))
    var bind: [String] = []

    @Flag(name: .long, inversion: .prefixedNo, help: "Also gather ICE-TCP candidates.")
    var iceTcp: Bool?

    @Flag(name: .long, inversion: .prefixedNo, help: "Send RFC 7675 consent checks on the selected pair (consent is always answered, as browsers need): a pair whose peer stops answering is given up at once and ICE restarts, instead of waiting for the media's stall. Off by default: one unanswered check (a short cut, heavy loss) gives up a working pair.")
    var consentFreshness: Bool?

    func iceConfiguration(role: IceRole, _ read: SettingsReader) throws -> IceConfiguration {
        var configuration = IceConfiguration(role: role)
        configuration.stunServer = try read.parsed("stun", stun, "HOST:PORT", IceServerAddress.init)
        read.warnIfOnCommandLine("turn", given: !turn.isEmpty)
        let servers = try read.list("turn", turn)
        var specs = servers.values.map { (spec: $0, origin: servers.origin) }
        specs += try read.secretLines("turn-file", turnFile).map { (spec: $0, origin: "a line of the TURN file") }
        for (spec, origin) in specs {
            guard let server = TurnServer(spec: spec) else {
                // The credentials stay out of the message.
                let shown = spec.lastIndex(of: "@").map { "********" + spec[$0...] } ?? "********"
                throw ValidationError("\(origin) '\(shown)' is not USER:PASS@HOST:PORT[?transport=udp|tcp]")
            }
            configuration.turnServers.append(server)
        }
        configuration.relayOnly = try read.flag("relay-only", relayOnly)
        configuration.localAddresses = try read.list("bind", bind).values
        configuration.iceTCP = try read.flag("ice-tcp", iceTcp)
        configuration.consentFreshness = try read.flag("consent-freshness", consentFreshness)
        return configuration
    }
}

/// Gathers local ICE candidates and prints them: a quick check of what a peer would see.
struct Gather: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Gather this machine's ICE candidates and print them as SDP attributes.",
        discussion: """
            Shows what a peer would be offered: host candidates on each interface, a \
            server-reflexive candidate per --stun server, relayed candidates per --turn server. \
            Exits non-zero if nothing could be gathered.
            """)

    @OptionGroup var home: HomeOption

    @OptionGroup var network: NetworkOptions

    @Option(name: .long, help: "Give up after this many seconds.")
    var timeout: Double = 10

    func run() async throws {
        let settings = try await loadSettings(home: home.home)
        let configuration = try network.iceConfiguration(role: .controlling, SettingsReader(settings: settings))
        let agent: IceAgent
        do {
            agent = try await IceAgent(configuration: configuration)
        } catch {
            printError("callnode: \(error)")
            throw ExitCode(1)
        }
        var found = 0
        do {
            let gathering = try await agent.gather()
            print("a=ice-ufrag:\(gathering.credentials.ufrag)")
            print("a=ice-pwd:\(gathering.credentials.pwd)")
            let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1000))
            let candidates = gathering.candidates
            found = await withTaskGroup(of: Int?.self) { group in
                group.addTask {
                    var count = 0
                    for await candidate in candidates {
                        print(candidate.sdpLine)
                        count += 1
                    }
                    print("a=end-of-candidates")
                    return count
                }
                group.addTask {
                    try? await Task.sleep(until: deadline, clock: .continuous)
                    return nil
                }
                let first = await group.next() ?? nil
                group.cancelAll()
                return first ?? -1
            }
        } catch {
            await agent.close()
            printError("callnode: \(error)")
            throw ExitCode(1)
        }
        await agent.close()
        if found < 0 {
            printError("callnode: gathering did not finish within \(timeout) s (is the STUN/TURN server reachable?)")
            throw ExitCode(1)
        }
        if found == 0 {
            printError("callnode: no candidates gathered (check --bind and the network)")
            throw ExitCode(1)
        }
    }
}

/// Writes one line to standard error (unbuffered, so it is not lost on exit).
func printError(_ line: String) {
    var text = line
    if !text.hasSuffix("\n") { text += "\n" }
    _ = text.withCString { write(2, $0, strlen($0)) }
}
