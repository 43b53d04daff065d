import ArgumentParser
import CallNode
import Foundation
import NodeControl

#if canImport(Glibc)
import Glibc
#endif

/// The control API's servers of a running node: its socket (or TCP address), and the console's
/// port beside it, serving the same API.
struct RunningControl {
    let servers: [ControlServer]

    /// Closes the console's port first, then the server that owns the API.
    func close() async {
        for server in servers.reversed() { await server.close() }
    }
}

/// Starts the control API on a running node where the settings put it (`byDefault`: the
/// home's socket when they say nothing), and the console if asked, and says where. Nil when
/// both are off.
func startControl(_ node: CallNode, _ setup: NodeSetup, home: String, runner: CallRunner, byDefault: Bool) async throws -> RunningControl? {
    var address: ControlAddress?
    switch setup.control {
    case .off: address = nil
    case let .at(given): address = given
    case nil: address = byDefault ? .unix(defaultControlSocket(home: home)) : nil
    }
    let api = ControlAPI(node: node, drain: runner.drainRequester)
    var servers: [ControlServer] = []
    if let address {
        do {
            servers.append(try await ControlServer(api: api, address: address, token: setup.controlToken))
        } catch {
            if setup.control != nil {
                printError("callnode: \(error)")
                await node.shutdown()
                throw ExitCode(1)
            }
            // The default socket cannot be had (another node with this home holds it, or the
            // home's path is too long for a socket's): this node runs without an API rather
            // than not at all. An address asked for is another matter.
            printError("callnode: note: running without the control API: \(error)")
        }
    }
    var consoleNote: String?
    if let console = setup.console {
        let token: String
        if let configured = setup.controlToken, !configured.isEmpty {
            (token, consoleNote) = (configured, "sign in with the control token")
        } else {
            do {
                (token, consoleNote) = (try consoleToken(home: home), "sign in with the token in \(home)/console-token")
            } catch {
                printError("callnode: cannot keep the console's token: \(error)")
                for server in servers { await server.close() }
                await node.shutdown()
                throw ExitCode(1)
            }
        }
        do {
            // The same API: the first server feeds it the node's events and closes it.
            servers.append(try await ControlServer(api: api, address: .tcp(host: console.host, port: console.port), token: token,
                                                   ownsAPI: servers.isEmpty))
        } catch {
            printError("callnode: the console: \(error)")
            for server in servers { await server.close() }
            await node.shutdown()
            throw ExitCode(1)
        }
    }
    guard !servers.isEmpty else { return nil }
    // Served until the command closes them after the run (not cancelled with the run's own
    // tasks: an answer being written, a drain's, is finished first).
    for server in servers { runner.keepUncancelled { await server.run() } }
    for (index, server) in servers.enumerated() {
        let isConsole = setup.console != nil && index == servers.count - 1
        guard case let .tcp(host, port) = server.address, isConsole else {
            if runner.json {
                runner.emit(["event": "control", "address": server.address.description])
            } else {
                print("control: \(server.address) (callnode ctl --help)")
            }
            continue
        }
        let url = "http://\(SignalAddress(host: host, port: port))/console/"
        if runner.json {
            runner.emit(["event": "console", "url": url])
        } else {
            print("console: \(url) (\(consoleNote ?? "sign in with the control token"))")
        }
    }
    fflush(nil)
    return RunningControl(servers: servers)
}

/// The console's token when no control token is set: made once (32 random bytes, hex) and
/// kept in `HOME/console-token`, readable by this user only, so a restart keeps the browser
/// signed in.
func consoleToken(home: String) throws -> String {
    let path = (home as NSString).appendingPathComponent("console-token")
    if let text = try? String(contentsOfFile: path, encoding: .utf8) {
        let token = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if token.count >= 32 { return token }
    }
    var generator = SystemRandomNumberGenerator()
    let token = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    guard FileManager.default.createFile(atPath: path, contents: Data((token + "\n").utf8), attributes: [.posixPermissions: 0o600]) else {
        throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
    }
    chmod(path, 0o600)
    return token
}
