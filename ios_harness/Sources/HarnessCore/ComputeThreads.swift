import Foundation

/// How many CPU threads an engine runs on when neither the spec nor a tuning table says.
///
/// Apple chips mix performance and efficiency cores. A matvec split across all of them finishes
/// when the slowest part does, so the performance cores wait on the efficiency cores: the default
/// is the performance-core count. Elsewhere (no performance levels) it is every active CPU.
public enum ComputeThreads {
    /// The default for this machine; always >= 1.
    public static func defaultCount() -> Int {
        choose(performanceCores: Platform.performanceCores(), active: ProcessInfo.processInfo.activeProcessorCount)
    }

    /// The rule behind `defaultCount`: the performance cores when known, never more than are active.
    static func choose(performanceCores: Int?, active: Int) -> Int {
        let all = max(1, active)
        guard let p = performanceCores, p >= 1 else { return all }
        return min(p, all)
    }
}
