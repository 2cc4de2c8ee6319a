import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A fixed set of threads that run the parts of one dispatch; the caller works too.
///
/// A dispatch is `parts` independent pieces (contiguous row ranges). Threads claim parts from one
/// ticket counter that also carries the dispatch's generation, so a thread that was descheduled
/// (a shared machine) never holds up the others: whoever is running takes the remaining parts.
/// Which thread computes a part never changes its bits: a part is one kernel over its rows.
/// Dispatch is a generation counter the workers spin on, not a queue: a decode token is ~60
/// dispatches, so a lock and a wake-up per dispatch would cost more than the work. Idle workers
/// back off from spinning to yielding to short sleeps.
final class WorkerPool: @unchecked Sendable {
    let count: Int
    /// Parts per dispatch.
    let parts: Int
    private let generation = Atomic<Int>(0)
    /// `generation << 24 | next unclaimed part` of the dispatch in flight.
    private let ticket = Atomic<Int>(0)
    private let done = Atomic<Int>(0)
    private let exited = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    private var body: ((Int) -> Void)?
    private var workers: [Thread] = []
    private static let partBits = 24

    init(threads: Int, partsPerThread: Int = 4) {
        count = max(1, threads)
        parts = count == 1 ? 1 : count * partsPerThread
        for id in 1..<count {
            let t = Thread { [unowned self] in self.work() }
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
        // Workers hold `unowned self`: wait until they are gone.
        while exited.load(ordering: .acquiring) < count - 1 { sched_yield() }
    }

    /// Runs `body(part)` for every part in 0..<parts across the threads; returns when all are done.
    func run(_ body: (Int) -> Void) {
        if count == 1 {
            body(0)
            return
        }
        withoutActuallyEscaping(body) { escaping in
            self.body = escaping
            let g = (generation.load(ordering: .relaxed) + 1) & ((1 << 30) - 1)
            done.store(0, ordering: .relaxed)
            ticket.store(g << Self.partBits, ordering: .releasing)
            generation.store(g, ordering: .releasing)
            claimParts(g)
            var spins = 0
            while done.load(ordering: .acquiring) != parts {
                spins += 1
                if spins > 1 << 16 { sched_yield() }
            }
            self.body = nil
        }
    }

    /// Claims and runs parts of dispatch `g` until none is left (or `g` is over).
    private func claimParts(_ g: Int) {
        var t = ticket.load(ordering: .acquiring)
        while t >> Self.partBits == g, t & ((1 << Self.partBits) - 1) < parts {
            let (won, seen) = ticket.compareExchange(expected: t, desired: t + 1, ordering: .acquiringAndReleasing)
            if won {
                body!(t & ((1 << Self.partBits) - 1))
                done.add(1, ordering: .releasing)
                t = ticket.load(ordering: .acquiring)
            } else {
                t = seen
            }
        }
    }

    private func work() {
        var seen = 0
        while true {
            var spins = 0
            var g = generation.load(ordering: .acquiring)
            while g == seen {
                spins += 1
                // Between the dispatches of a token the caller runs short serial steps (norms,
                // input quantization): spin through those; yield only when the gap is longer.
                if spins > 1 << 24 {
                    usleep(200)
                } else if spins > 1 << 18 {
                    sched_yield()
                }
                g = generation.load(ordering: .acquiring)
            }
            seen = g
            if stopping.load(ordering: .acquiring) {
                exited.add(1, ordering: .releasing)
                return
            }
            claimParts(g)
        }
    }

    /// The contiguous share `part` of `parts` over `total` items.
    @inline(__always)
    static func share(_ total: Int, _ part: Int, _ parts: Int) -> Range<Int> {
        (total * part / parts)..<(total * (part + 1) / parts)
    }
}
