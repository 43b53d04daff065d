import FuzzTargets

#if CALLNODE_LIBFUZZER
import Glibc

// Built with `-sanitize=fuzzer` (see scripts/fuzz): libFuzzer supplies `main` and calls these.
// The target comes from CALLNODE_FUZZ_TARGET.

nonisolated(unsafe) var selected = FuzzTarget.sdp

@_cdecl("LLVMFuzzerInitialize")
public func initialize(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>) -> CInt {
    let name = getenv("CALLNODE_FUZZ_TARGET").map { String(cString: $0) } ?? ""
    guard let target = FuzzTarget(rawValue: name) else {
        let message = "callnode-fuzz: set CALLNODE_FUZZ_TARGET to one of: \(FuzzTarget.allCases.map(\.rawValue).joined(separator: ", "))\n"
        _ = message.withCString { write(2, $0, strlen($0)) }
        exit(2)
    }
    selected = target
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    selected.run(data.map { Array(UnsafeBufferPointer(start: $0, count: count)) } ?? [])
    return 0
}

@_silgen_name("LLVMFuzzerRunDriver")
func runDriver(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
               _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

// SwiftPM links an executable's entry point under this name (so that tests can load the
// executable); here it hands the process to libFuzzer's driver.
@_cdecl("callnode_fuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return runDriver(&count, &arguments) { data, size in testOneInput(data, size) }
}

#else
import Foundation

/// Without libFuzzer: replays saved inputs through a target, to reproduce a finding in an
/// ordinary build (`swift run callnode-fuzz srtp Fuzz/regressions/srtp/*`).
@main
struct Replay {
    static func main() {
        let arguments = CommandLine.arguments.dropFirst()
        if arguments.first == "--write-seeds", let directory = arguments.dropFirst().first {
            for target in FuzzTarget.allCases {
                let folder = directory + "/" + target.rawValue
                try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
                for seed in target.seeds {
                    _ = FileManager.default.createFile(atPath: folder + "/" + seed.name, contents: Data(seed.bytes))
                }
                print("\(folder): \(target.seeds.count) seeds")
            }
            return
        }
        guard let name = arguments.first, let target = FuzzTarget(rawValue: name), arguments.count > 1 else {
            let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: "|")
            FileHandle.standardError.write(Data("""
                usage: callnode-fuzz <\(names)> FILE...
                         Runs each saved input through the target; a finding traps with its reason.
                       callnode-fuzz --write-seeds DIR
                         Writes the seed inputs (made by the node's own writers) to DIR/<target>/.
                       Fuzzing itself: scripts/fuzz.

                """.utf8))
            exit(2)
        }
        for path in arguments.dropFirst() {
            guard let data = FileManager.default.contents(atPath: path) else {
                FileHandle.standardError.write(Data("callnode-fuzz: cannot read \(path)\n".utf8))
                exit(1)
            }
            target.run(Array(data))
            print("\(path): ok")
        }
    }
}
#endif
