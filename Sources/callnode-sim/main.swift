import ArgumentParser
import CSimHost
import CallNodeSimulation
import Foundation

// A run must hash the same way every time: Swift seeds its hashing per process unless told
// not to, and dictionaries would iterate in another order on every run. Start again with the
// variable set (before anything has hashed).
if getenv("SWIFT_DETERMINISTIC_HASHING") == nil {
    setenv("SWIFT_DETERMINISTIC_HASHING", "1", 1)
    execv("/proc/self/exe", CommandLine.unsafeArgv)
    print("callnode-sim: cannot start again with deterministic hashing (\(String(cString: strerror(errno)))); traces may differ between runs")
}

SimCommand.main()
