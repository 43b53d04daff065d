import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Where SwiftPM put this build's products (executables, `Modules/`).
public enum BuildProducts {
    /// The build directory holding the running test binary (which may sit in an `.xctest`
    /// bundle inside it).
    public static func directory() throws -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { throw TestFailure("cannot read /proc/self/exe") }
        let path = String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var directory = URL(fileURLWithPath: path).deletingLastPathComponent()
        for _ in 0..<3 {
            if FileManager.default.fileExists(atPath: directory.appendingPathComponent("Modules").path) { return directory.path }
            directory.deleteLastPathComponent()
        }
        throw TestFailure("no Modules directory near the test binary \(path)")
    }

    /// An executable product of this package; fails clearly when it was not built.
    public static func executable(_ name: String) throws -> String {
        let path = try directory() + "/" + name
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw TestFailure("\(path) is missing: build all targets (swift build --build-tests) first")
        }
        return path
    }
}
