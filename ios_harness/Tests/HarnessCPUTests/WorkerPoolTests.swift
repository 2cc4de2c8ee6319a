import Testing
@testable import HarnessCPU

@Suite struct WorkerPoolTests {
    /// Every part runs exactly once per dispatch, even with more threads than cores (threads get
    /// descheduled and the others take their parts).
    @Test(arguments: [1, 2, 3, 5])
    func everyPartRunsOncePerDispatch(_ threads: Int) {
        let pool = WorkerPool(threads: threads)
        defer { pool.stop() }
        let counts = UnsafeMutablePointer<Int>.allocate(capacity: pool.parts)
        counts.initialize(repeating: 0, count: pool.parts)
        defer { counts.deallocate() }
        for _ in 0..<2_000 { pool.run { counts[$0] += 1 } }
        #expect((0..<pool.parts).allSatisfy { counts[$0] == 2_000 })
    }

    @Test func sharesCoverTheRangeInOrder() {
        let parts = (0..<7).map { WorkerPool.share(100, $0, 7) }
        #expect(parts.first?.lowerBound == 0 && parts.last?.upperBound == 100)
        #expect(zip(parts, parts.dropFirst()).allSatisfy { $0.upperBound == $1.lowerBound })
    }
}
