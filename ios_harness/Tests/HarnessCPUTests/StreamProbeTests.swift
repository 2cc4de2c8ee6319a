import Testing
@testable import HarnessCore
@testable import HarnessCPU

@Suite struct StreamProbeTests {
    func host(llc: Int?, memory: UInt64) -> HostInfo {
        HostInfo(os: "t", arch: "t", cpuModel: "t", logicalCpus: 2, memoryBytes: memory,
                 caches: llc.map { [CacheInfo(level: 3, type: "Unified", sizeBytes: $0, sharedCpus: 2)] } ?? [])
    }

    @Test func bufferIsSizedFromTheLastLevelCache() {
        #expect(StreamProbe.defaultBufferBytes(host: host(llc: 32 << 20, memory: 64 << 30)) == 512 << 20)
        #expect(StreamProbe.defaultBufferBytes(host: host(llc: 480 << 20, memory: 64 << 30)) == 7680 << 20)
        // Capped at a quarter of RAM, never below 256 MiB.
        #expect(StreamProbe.defaultBufferBytes(host: host(llc: 480 << 20, memory: 8 << 30)) == 2 << 30)
        #expect(StreamProbe.defaultBufferBytes(host: host(llc: 4 << 20, memory: 64 << 30)) == 256 << 20)
    }

    @Test func smallProbeReportsEveryPattern() {
        let report = StreamProbe(threads: 2, bufferBytes: 8 << 20, repeats: 1).run(host: host(llc: 1 << 20, memory: 1 << 30))
        #expect(report.results.map(\.pattern) == ["stream", "q8_0_layout", "q4_0_layout", "q8_0_kernel", "q4_0_kernel"])
        #expect(report.results.allSatisfy { $0.bestGBPerS > 0 && $0.bytes > 0 })
    }
}
