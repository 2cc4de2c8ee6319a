import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A fixed set of threads that run one body per dispatch, the caller taking share 0.
///
/// Dispatch is a generation counter the workers spin on, not a queue: a decode token is ~100
/// dispatches, so a lock and a wake-up per dispatch would cost more than the work. Idle workers
/// back off from spinning to yielding to short sleeps.
final class WorkerPool: @unchecked Sendable {
    let count: Int
    private let generation = Atomic<Int>(0)
    private let pending = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    private var body: ((Int) -> Void)?
    private var workers: [Thread] = []

    init(threads: Int) {
        count = max(1, threads)
        for id in 1..<count {
            let t = Thread { [unowned self] in self.work(id) }
            t.name = "rawloop-\(id)"
            t.start()
            workers.append(t)
        }
    }

    deinit { stop() }

    /// Stops the workers; the pool cannot be used afterwards.
    func stop() {
        if stopping.exchange(true, ordering: .sequentiallyConsistent) { return }
        generation.add(1, ordering: .releasing)
        // Workers exit on their own; they hold `unowned self`, so wait until they have.
        while pending.load(ordering: .acquiring) > -(count - 1) { sched_yield() }
    }

    /// Runs `body(i)` for i in 0..<count, i = 0 on the calling thread; returns when all are done.
    func run(_ body: (Int) -> Void) {
        if count == 1 {
            body(0)
            return
        }
        withoutActuallyEscaping(body) { escaping in
            self.body = escaping
            pending.store(count - 1, ordering: .relaxed)
            generation.add(1, ordering: .releasing)
            escaping(0)
            var spins = 0
            while pending.load(ordering: .acquiring) != 0 {
                spins += 1
                if spins > 1 << 14 { sched_yield() }
            }
            self.body = nil
        }
    }

    private func work(_ id: Int) {
        var seen = 0
        while true {
            var spins = 0
            var g = generation.load(ordering: .acquiring)
            while g == seen {
                spins += 1
                if spins > 1 << 22 {
                    usleep(200)
                } else if spins > 1 << 16 {
                    sched_yield()
                }
                g = generation.load(ordering: .acquiring)
            }
            seen = g
            if stopping.load(ordering: .acquiring) {
                pending.subtract(1, ordering: .releasing)
                return
            }
            body!(id)
            pending.subtract(1, ordering: .releasing)
        }
    }

    /// The contiguous share of `total` items that worker `id` of `count` takes.
    @inline(__always)
    static func share(_ total: Int, _ id: Int, _ count: Int) -> Range<Int> {
        (total * id / count)..<(total * (id + 1) / count)
    }
}
