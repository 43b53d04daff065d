import Foundation
import Locking

#if canImport(Glibc)
import Glibc
#endif

/// A Kamailio registrar and proxy on loopback with digest authentication, for tests.
///
/// Listens on UDP and TCP 127.0.0.1:`port`; serves `domain` (also reachable as 127.0.0.1). REGISTERs
/// are challenged with 401 (realm `domain`), INVITEs from `domain` users with 407; a wrong password
/// gets `403 Wrong password`, a user not in `users` `403 Unknown user`. Locations live in memory
/// only: ``restart()`` forgets every registration. INVITEs to a user not in `users` get 404, to one
/// not registered 480; in-dialog requests follow the Record-Route. The log (stderr, `debug=2`)
/// has a line per request (`request INVITE sip:bob@… from …`), `registered sip:alice@example.test
/// (1 contacts)` per accepted REGISTER (`unregistered sip:…` once its last contact is removed),
/// `auth: … failed with -2` per wrong password and `reply 200 OK for INVITE …` per relayed INVITE
/// reply.
///
/// Kamailio 5.6 (Debian 12's): started in the foreground (`-DD -E`), it needs nothing outside
/// `directory`; it is ready in a few milliseconds and exits within milliseconds of SIGTERM,
/// taking its worker processes with it.
public final class KamailioServer: Sendable {
    public static let executable = "/usr/sbin/kamailio"

    /// Whether Kamailio is installed (`apt-get install kamailio`).
    public static var isInstalled: Bool { access(executable, X_OK) == 0 }

    public let directory: String
    public let port: Int
    public let domain: String
    public let users: [String: String]
    public var configPath: String { directory + "/kamailio.cfg" }
    /// Kamailio's stderr, appended to across restarts.
    public var logPath: String { directory + "/kamailio.log" }
    /// Where a client sends REGISTERs and INVITEs (its outbound proxy).
    public var uri: String { "sip:127.0.0.1:\(port)" }

    private let process = Locked<ChildProcess?>(nil)
    /// Preprocessor defines given on the command line (`-A NAME=VALUE`).
    public let defines: [String]

    /// Writes the configuration into `directory` (created if missing); ``start()`` runs it.
    /// - Parameters:
    ///   - domain: the SIP domain and digest realm, a host name or IPv4 address (`example.test`
    ///     needs no DNS: clients reach the server through `uri`, and a request-URI or From in
    ///     this domain, or addressed to 127.0.0.1:`port`, is local).
    ///   - users: user names (letters, digits, `.`, `_`, `-`, `~`) and their plain-text passwords.
    ///   - authenticateCalls: whether INVITEs (and other out-of-dialog requests) from `domain`
    ///     users are challenged with 407, as REGISTERs always are with 401.
    public init(directory: String, port: Int, domain: String = "127.0.0.1", users: [String: String],
                authenticateCalls: Bool = true) throws {
        guard (1...65_535).contains(port) else { throw TestFailure("bad port \(port)") }
        self.directory = directory
        self.port = port
        self.domain = domain
        self.users = users
        defines = []
        let config = try Self.config(port: port, domain: domain, users: users, authenticateCalls: authenticateCalls)
        try FileManager.default.createDirectory(atPath: directory + "/run", withIntermediateDirectories: true)
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    /// Runs a configuration file of one's own (`contrib/kamailio/kamailio.cfg`), copied into
    /// `directory`, with `defines` (`-A`); it must listen on UDP 127.0.0.1:`port` and answer an
    /// OPTIONS to itself with 200.
    public init(directory: String, port: Int, configuration file: String, defines: [String]) throws {
        self.directory = directory
        self.port = port
        domain = "127.0.0.1"
        users = [:]
        self.defines = defines
        try FileManager.default.createDirectory(atPath: directory + "/run", withIntermediateDirectories: true)
        try? FileManager.default.removeItem(atPath: directory + "/kamailio.cfg")
        try FileManager.default.copyItem(atPath: file, toPath: directory + "/kamailio.cfg")
    }

    deinit { stop() }

    /// Starts Kamailio and returns once it answers an OPTIONS on its UDP port.
    public func start() throws {
        guard Self.isInstalled else { throw TestFailure("kamailio is not installed: apt-get install kamailio") }
        let running = process.withLock { current -> Bool in
            if let child = current, child.isRunning { return true }
            current = nil
            return false
        }
        guard !running else { throw TestFailure("kamailio is already running on port \(port)") }
        let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { if null >= 0 { close(null) } }
        // -DD: stay in the foreground; -E: log to stderr; -Y and -P keep /var/run out of it.
        let child = try ChildProcess(Self.executable, [
            "-f", configPath, "-DD", "-E", "-Y", directory + "/run", "-P", directory + "/kamailio.pid",
            "-m", "32", "-M", "8",
        ] + defines.flatMap { ["-A", $0] }, output: logPath, stdin: null >= 0 ? null : nil)
        process.withLock { $0 = child }
        do {
            try waitUntilAnswering(child, deadline: .now + .seconds(10))
        } catch {
            stop()
            throw error
        }
    }

    /// Stops Kamailio (SIGTERM, then SIGKILL for it and any worker left behind). Registrations
    /// are lost.
    public func stop() {
        guard let child = process.withLock({ current -> ChildProcess? in
            let child = current
            current = nil
            return child
        }) else { return }
        child.stop(grace: .seconds(5))
        // The main process ends its workers itself on SIGTERM; only if it had to be killed (or
        // died of a signal) might workers still hold the port.
        if child.waitBlocking() == -1 { killStrayWorkers() }
        unlink(directory + "/kamailio.pid")
    }

    /// Stops and starts Kamailio: the same port and users, no registrations.
    public func restart() throws {
        stop()
        try start()
    }

    public var isRunning: Bool { process.withLock { $0?.isRunning ?? false } }

    /// Everything Kamailio has logged so far.
    public func logText() -> String {
        (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
    }

    /// Waits until the log holds `text` at least `count` times (it is appended to across
    /// restarts); false at the deadline.
    public func waitForLog(_ text: String, count: Int = 1, timeout: Duration = .seconds(10)) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if logText().components(separatedBy: text).count - 1 >= count { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    /// Sends OPTIONS to the UDP port until `200 Keepalive` comes back.
    private func waitUntilAnswering(_ child: ChildProcess, deadline: ContinuousClock.Instant) throws {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket failed: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port)).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let connected = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard connected else { throw TestFailure("cannot reach 127.0.0.1:\(port): \(String(cString: strerror(errno)))") }
        let localPort = UInt16(bigEndian: address.sin_port)
        let probe = """
            OPTIONS sip:127.0.0.1:\(port) SIP/2.0\r
            Via: SIP/2.0/UDP 127.0.0.1:\(localPort);rport;branch=z9hG4bK-probe-\(getpid())-\(localPort)\r
            Max-Forwards: 70\r
            From: <sip:probe@127.0.0.1>;tag=probe\r
            To: <sip:127.0.0.1:\(port)>\r
            Call-ID: probe-\(getpid())-\(localPort)@127.0.0.1\r
            CSeq: 1 OPTIONS\r
            Content-Length: 0\r
            \r

            """
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            guard child.isRunning else {
                throw TestFailure("kamailio exited on start (port \(port) in use?); log: \(logPath)\n\(logText().suffix(1500))")
            }
            guard ContinuousClock.now < deadline else {
                throw TestFailure("kamailio did not answer OPTIONS on 127.0.0.1:\(port); log: \(logPath)")
            }
            _ = probe.withCString { send(fd, $0, strlen($0), 0) }  // ECONNREFUSED until it listens
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 50) == 1 {
                let count = recv(fd, &buffer, buffer.count, 0)
                if count > 0, String(decoding: buffer.prefix(count), as: UTF8.self).hasPrefix("SIP/2.0 200") { return }
            }
        }
    }

    /// SIGKILLs processes still running this server's configuration.
    private func killStrayWorkers() {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return }
        for entry in entries {
            guard let pid = pid_t(entry), pid != getpid() else { continue }
            let commandLine = Self.readAll("/proc/\(pid)/cmdline").map { $0 == 0 ? 0x20 : $0 }
            if String(decoding: commandLine, as: UTF8.self).contains(configPath) { kill(pid, SIGKILL) }
        }
    }

    /// A file's bytes read to its end (/proc files report size 0).
    private static func readAll(_ path: String) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(fd, &chunk, chunk.count)
            guard count > 0 else { break }
            bytes += chunk.prefix(count)
        }
        return bytes
    }

    /// The Kamailio configuration: a standard minimal registrar and proxy (the shape of
    /// Kamailio's default configuration, without NAT, accounting, presence or database).
    /// Passwords are compared through the `auth` module's `pv_auth_check`, so no database is
    /// needed; each start picks a new nonce secret, so a nonce from before a restart is stale
    /// (401 again, not 403).
    ///
    /// - Parameters:
    ///   - address: the IPv4 address it listens on (UDP and TCP).
    ///   - recordRoute: whether it stays in the dialogs of the INVITEs it relays; without,
    ///     requests in a dialog go straight between its ends (and any that reach it get 404).
    ///   - natHelper: a registrar for phones behind NATs, as Kamailio's `nathelper` makes one:
    ///     a REGISTER from behind a NAT is saved with the address it came from (calls to that
    ///     user go there), and a private Contact in an INVITE or its reply is rewritten to the
    ///     address the message came from.
    public static func config(port: Int, domain: String, users: [String: String], authenticateCalls: Bool = true,
                              address: String = "127.0.0.1", recordRoute: Bool = true, natHelper: Bool = false) throws -> String {
        guard address.split(separator: ".").count == 4, address.split(separator: ".").allSatisfy({ UInt8($0) != nil }) else {
            throw TestFailure("bad listening address \"\(address)\"")
        }
        let hostCharacters = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")
        guard !domain.isEmpty, domain.allSatisfy(hostCharacters.contains) else { throw TestFailure("bad domain \"\(domain)\"") }
        let userCharacters = hostCharacters.union("_~")
        var credentials = ""
        for (user, password) in users.sorted(by: { $0.key < $1.key }) {
            guard !user.isEmpty, user.allSatisfy(userCharacters.contains) else { throw TestFailure("bad user name \"\(user)\"") }
            guard !password.unicodeScalars.contains(where: { $0 == "\n" || $0 == "\r" || $0 == "\0" }) else {
                throw TestFailure("a password for \(user) holds a line break or NUL")
            }
            // Kamailio's string literals take \\ and \" escapes; $ is literal in an assignment.
            let quoted = password.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            credentials += "\tif ($var(user) == \"\(user)\") { $var(known) = 1; $var(password) = \"\(quoted)\"; }\n"
        }
        // The domain is compared as text, not made an alias: an alias of 127.0.0.1 (any port) would
        // make every loopback contact "myself", and loose_route would then mis-route ACK and BYE.
        let local = domain.lowercased()
        let authenticated = authenticateCalls ? "is_method(\"REGISTER\") || $(fd{s.tolower}) == \"\(local)\"" : "is_method(\"REGISTER\")"
        return """
            #!KAMAILIO
            # Minimal registrar and proxy for CallNode tests: loopback only, digest auth,
            # users and passwords in this file, locations in memory.

            debug=2
            log_stderror=yes
            fork=yes
            children=2
            tcp_children=2
            disable_sctp=yes
            auto_aliases=no
            dns=no
            rev_dns=no
            use_dns_cache=off
            dns_try_ipv6=no
            listen=udp:\(address):\(port)
            listen=tcp:\(address):\(port)

            loadmodule "tm.so"
            loadmodule "tmx.so"
            loadmodule "sl.so"
            loadmodule "rr.so"
            loadmodule "pv.so"
            loadmodule "maxfwd.so"
            loadmodule "textops.so"
            loadmodule "siputils.so"
            loadmodule "xlog.so"
            loadmodule "sanity.so"
            loadmodule "usrloc.so"
            loadmodule "registrar.so"
            loadmodule "auth.so"
            \(natHelper ? "loadmodule \"nathelper.so\"\nmodparam(\"nathelper\", \"received_avp\", \"$avp(RECEIVED)\")\nmodparam(\"registrar\", \"received_avp\", \"$avp(RECEIVED)\")" : "")

            modparam("tm", "fr_timer", 10000)
            modparam("tm", "fr_inv_timer", 30000)
            modparam("usrloc", "db_mode", 0)
            modparam("registrar", "min_expires", 1)
            modparam("registrar", "max_expires", 3600)
            modparam("registrar", "default_expires", 3600)

            request_route {
            \txlog("L_INFO", "request $rm $ru from $si:$sp\\n");
            \troute(REQINIT);
            \tif (is_method("CANCEL")) {
            \t\tif (t_check_trans()) route(RELAY);
            \t\texit;
            \t}
            \tif (!is_method("ACK")) {
            \t\tif (t_precheck_trans()) {
            \t\t\tt_check_trans();
            \t\t\texit;
            \t\t}
            \t\tt_check_trans();
            \t}
            \troute(WITHINDLG);
            \troute(AUTH);
            \tremove_hf("Route");
            \(recordRoute ? "\tif (is_method(\"INVITE\")) record_route();" : "\t# No Record-Route: the dialog's requests go straight between its ends.")
            \troute(REGISTRAR);
            \tif ($rU == $null) {
            \t\tsl_send_reply("484", "Address Incomplete");
            \t\texit;
            \t}
            \troute(LOCATION);
            }

            route[REQINIT] {
            \tforce_rport();
            \(natHelper ? "\tif (nat_uac_test(\"19\")) {\n\t\tif (is_method(\"REGISTER\")) fix_nated_register();\n\t\telse if (!has_totag()) fix_nated_contact();\n\t}" : "")
            \tif (!mf_process_maxfwd_header("10")) {
            \t\tsl_send_reply("483", "Too Many Hops");
            \t\texit;
            \t}
            \tif (is_method("OPTIONS") && uri == myself && $rU == $null) {
            \t\tsl_send_reply("200", "Keepalive");
            \t\texit;
            \t}
            \tif (!sanity_check("1511", "7")) {
            \t\txlog("L_WARN", "malformed SIP request from $si:$sp\\n");
            \t\texit;
            \t}
            }

            route[WITHINDLG] {
            \tif (!has_totag()) return;
            \tif (loose_route()) {
            \t\troute(RELAY);
            \t\texit;
            \t}
            \tif (is_method("ACK")) {
            \t\tif (t_check_trans()) route(RELAY);
            \t\texit;
            \t}
            \tsl_send_reply("404", "Not here");
            \texit;
            }

            # Sets $var(known) and $var(password) for the user $var(user).
            route[USER] {
            \t$var(known) = 0;
            \t$var(password) = "";
            \(credentials)}

            route[AUTH] {
            \tif (\(authenticated)) {
            \t\tif (is_present_hf("Authorization") || is_present_hf("Proxy-Authorization")) {
            \t\t\t$var(user) = $au;
            \t\t\troute(USER);
            \t\t\tif ($var(known) == 0) {
            \t\t\t\txlog("L_NOTICE", "auth: unknown user $au for $rm from $si:$sp\\n");
            \t\t\t\tsl_send_reply("403", "Unknown user");
            \t\t\t\texit;
            \t\t\t}
            \t\t}
            \t\tpv_auth_check("\(domain)", "$var(password)", "0", "1");
            \t\t$var(rc) = $rc;
            \t\tif ($var(rc) < 0) {
            \t\t\txlog("L_NOTICE", "auth: $rm from $fu failed with $var(rc)\\n");
            \t\t\tif ($var(rc) == -2) {
            \t\t\t\tsl_send_reply("403", "Wrong password");
            \t\t\t\texit;
            \t\t\t}
            \t\t\tif ($var(rc) == -8) {
            \t\t\t\tsl_send_reply("403", "Auth user mismatch");
            \t\t\t\texit;
            \t\t\t}
            \t\t\tauth_challenge("\(domain)", "0");
            \t\t\texit;
            \t\t}
            \t\tif (!is_method("REGISTER")) consume_credentials();
            \t}
            \tif ($(rd{s.tolower}) != "\(local)" && uri != myself) {
            \t\tsl_send_reply("403", "Not relaying");
            \t\texit;
            \t}
            }

            route[REGISTRAR] {
            \tif (!is_method("REGISTER")) return;
            \tif (!save("location")) {
            \t\tsl_reply_error();
            \t\texit;
            \t}
            \tif (reg_fetch_contacts("location", "$tu", "aor")) {
            \t\txlog("L_INFO", "registered $tu ($ulc(aor=>count) contacts)\\n");
            \t} else {
            \t\txlog("L_INFO", "unregistered $tu\\n");
            \t}
            \texit;
            }

            route[LOCATION] {
            \t$var(user) = $rU;
            \troute(USER);
            \tif ($var(known) == 0) {
            \t\tsl_send_reply("404", "Not Found");
            \t\texit;
            \t}
            \tif (!lookup("location")) {
            \t\t$var(rc) = $rc;
            \t\tt_newtran();
            \t\tswitch ($var(rc)) {
            \t\t\tcase -2:
            \t\t\t\tsend_reply("405", "Method Not Allowed");
            \t\t\t\texit;
            \t\t\tdefault:
            \t\t\t\tsend_reply("480", "Temporarily Unavailable");
            \t\t\t\texit;
            \t\t}
            \t}
            \troute(RELAY);
            }

            route[RELAY] {
            \tif (is_method("INVITE")) t_on_reply("REPLY");
            \tif (!t_relay()) sl_reply_error();
            \texit;
            }

            onreply_route[REPLY] {
            \txlog("L_INFO", "reply $rs $rr for $rm $tu\\n");
            \(natHelper ? "\tif (nat_uac_test(\"1\")) fix_nated_contact();" : "")
            }

            """
    }
}
