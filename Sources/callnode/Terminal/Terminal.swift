import Foundation
import POSIX

#if canImport(Glibc)
import Glibc
#endif

/// What `listen`, `call` and `web` need of the terminal they run in.
enum Terminal {
    /// The status line's parts joined with " | ", in their order, leaving out the lowest-ranked
    /// (highest `rank`) until the line fits `columns`; the first part alone is cut to fit.
    static func statusLine(_ parts: [(text: String, rank: Int)], columns: Int?) -> String {
        var kept = parts
        func joined() -> String { kept.map(\.text).joined(separator: " | ") }
        while let columns, kept.count > 1, joined().count >= columns,
              let lowest = kept.indices.dropFirst().max(by: { kept[$0].rank < kept[$1].rank }) {
            kept.remove(at: lowest)
        }
        return fit(joined(), columns: columns)
    }

    /// The terminal's width in columns; nil when stdout is not a terminal or does not say.
    static func columns() -> Int? {
        var size = winsize()
        guard ioctl(1, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
        return Int(size.ws_col)
    }

    /// `text` cut to one row of `columns`, marked "…" where cut. One column stays free: some
    /// terminals wrap as soon as the last one is written.
    static func fit(_ text: String, columns: Int?) -> String {
        guard let columns, text.count >= columns else { return text }
        return String(text.prefix(max(0, columns - 2))) + "…"
    }
}

/// Reads single key presses from a terminal on its own thread (blocking reads never touch the
/// cooperative pool) and restores the terminal mode when released.
final class RawKeyboard {
    private var saved = termios()

    init(onKey: @escaping @Sendable (UInt8) -> Void) {
        tcgetattr(0, &saved)
        var raw = saved
        raw.c_lflag &= ~tcflag_t(ICANON | ECHO)
        tcsetattr(0, TCSANOW, &raw)
        do {
            try SystemThread.start(name: "callnode-keys", detached: true) {
                var byte: UInt8 = 0
                while read(0, &byte, 1) == 1 { onKey(byte) }
            }
        } catch {
            FileHandle.standardError.write(Data("callnode: keys are off (\(error))\n".utf8))
        }
    }

    deinit {
        var saved = self.saved
        tcsetattr(0, TCSANOW, &saved)
    }
}

/// The keys of a running `listen`, `call` or `web`, for their help.
let callKeysHelp = """
    a answer (holding the other calls), e answer (ending the other calls), p early media (the \
    caller of the newest ringing call hears this node's input before it is answered: SIP callers, \
    with --app-owned-audio), d decline the newest ringing call, m mute, h hold or \
    resume, t transfer a SIP call (type the address to transfer it to, then Enter), s swap to the next call, c merge the calls into a conference, u take this call out \
    of the conference, 0-9 * # send DTMF, o switch to --speaker and back, v bypass voice \
    processing, + and - output volume, ] and [ microphone volume (3 dB a step), n do-not-disturb on and off, D drain (take no new calls, exit after the last), q \
    hang up; Ctrl-C hangs up and exits.
    """
