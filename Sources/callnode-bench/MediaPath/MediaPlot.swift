import ArgumentParser
import Foundation
import Glibc

/// The media sweep's plots (gnuplot, when it is installed).
extension MediaBench {
    /// gnuplot's path, if it is installed.
    static func gnuplot() -> String? {
        let paths = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
        return paths.map { "\($0)/gnuplot" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// CPU (percent of the machine) and late phase ticks (percent) against concurrent legs.
    static func draw(_ points: [(legs: Int, cpuPercent: Double, latePercent: Double)], baselinePercent: Double, to path: String,
                     title: String = "CallNode media legs in real time (\(ProcessInfo.processInfo.activeProcessorCount) cores)",
                     xLabel: String = "concurrent call legs") throws {
        guard let gnuplot = gnuplot() else { throw ValidationError("gnuplot is not installed") }
        let data = path + ".dat"
        try points.map { String(format: "%d %.2f %.3f", $0.legs, $0.cpuPercent, $0.latePercent) }.joined(separator: "\n")
            .write(toFile: data, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: data) }
        let script = """
            set terminal pngcairo size 900,520 font ",11"
            set output '\(path)'
            set title '\(title)'
            set xlabel '\(xLabel)'
            set ylabel 'CPU, % of the machine'
            set y2label 'late phase ticks, %'
            set ytics nomirror
            set y2tics
            set yrange [0:100]
            set y2range [0:*]
            set key outside bottom center horizontal
            set grid
            plot '\(data)' using 1:2 with linespoints lw 2 title 'CPU', \\
                 '\(data)' using 1:3 axes x1y2 with linespoints lw 2 title 'late ticks', \\
                 \(String(format: "%.3f", baselinePercent + 0.5)) axes x1y2 with lines dt 2 title 'late-tick limit (idle clock + 0.5 %)'
            """
        let scriptPath = path + ".gp"
        try script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: scriptPath) }
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup(gnuplot), strdup(scriptPath), nil]
        defer { for arg in argv { free(arg) } }
        guard posix_spawn(&pid, gnuplot, nil, nil, argv, environ) == 0 else { throw ValidationError("cannot start gnuplot") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        guard status == 0, FileManager.default.fileExists(atPath: path) else { throw ValidationError("gnuplot could not draw \(path)") }
    }
}
