@testable import RTP
import Testing

/// The loss-run report nodes exchange beside their receiver reports (RTCP APP `CNLR`).
@Suite struct LossRunReportTests {
    @Test func itRoundTripsInACompoundDatagramBesideAReceiverReport() throws {
        let report = LossRunReport(ssrc: 0x1111_2222, source: 0x3333_4444, lost: 12, runs: 4)
        let bytes = RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: 0x1111_2222)), report.packet])
        let parsed = try RTCPPacket.parseCompound(bytes)
        #expect(parsed.count == 2)
        #expect(LossRunReport(parsed[1]) == report)
        #expect(report.meanRun == 3)
        // Another APP packet, or a short one, is not a loss-run report.
        var other = bytes
        other[bytes.count - 12] = UInt8(ascii: "X")
        #expect(LossRunReport(try RTCPPacket.parseCompound(other)[1]) == nil)
        #expect(LossRunReport(.other(packetType: 204, bytes: [0x80, 204, 0, 1, 0, 0, 0, 1])) == nil)
        #expect(LossRunReport(ssrc: 1, source: 2, lost: 0, runs: 0).meanRun == nil)
    }

    @Test func receptionCountsEachGapAsOneRun() {
        var stats = ReceptionStatistics(clockRate: 48_000)
        // 100, 101, [102 103 lost], 104, [105 106 107 lost], 108, 109, [110 lost], 111
        for sequence in [100, 101, 104, 108, 109, 111] {
            stats.record(sequence: UInt16(sequence), timestamp: UInt32(sequence * 960), ssrc: 9, arrival: .milliseconds(20 * sequence))
        }
        let runs = stats.takeLossRuns()
        #expect(runs.lost == 6 && runs.runs == 3)
        #expect(stats.takeLossRuns() == (0, 0), "each interval counts afresh")
        // A run across the sequence number wrap.
        stats.record(sequence: 65_534, timestamp: 0, ssrc: 10, arrival: .zero)
        stats.record(sequence: 1, timestamp: 2_880, ssrc: 10, arrival: .milliseconds(60))
        #expect(stats.takeLossRuns() == (2, 1))
    }
}
