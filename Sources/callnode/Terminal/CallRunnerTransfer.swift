import Foundation

/// Typing a transfer's address at the terminal (the `t` key): the status line waits meanwhile.
extension CallRunner {
    /// A key while the transfer's address is typed: Enter transfers, Esc cancels, Backspace
    /// takes the last character back.
    func transferKey(_ key: UInt8) async {
        var entry = transferEntry ?? ""
        switch key {
        case 10, 13:
            transferEntry = nil
            FileHandle.standardOutput.write(Data("\n".utf8))
            guard let call = current, !entry.isEmpty else { return line("transfer cancelled") }
            do {
                try await node.transfer(call, to: entry)
                line("transferring the call to \(entry)…")
            } catch {
                line("\(error)")
            }
        case 27:
            transferEntry = nil
            FileHandle.standardOutput.write(Data("\n".utf8))
            line("transfer cancelled")
        case 8, 127:
            guard !entry.isEmpty else { return }
            entry.removeLast()
            transferEntry = entry
            FileHandle.standardOutput.write(Data("\u{8} \u{8}".utf8))
        case 32..<127:
            entry.append(Character(UnicodeScalar(key)))
            transferEntry = entry
            FileHandle.standardOutput.write(Data([key]))
        default:
            break
        }
    }
}
