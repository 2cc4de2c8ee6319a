import Foundation
import HarnessCore

extension RawLoopCPU {
    /// Caches a spec may ask to clear before this engine loads.
    /// `page_cache`: the model file's pages are dropped from the OS page cache (Linux), so the
    /// load reads storage. `compiled_kernels`: nothing to clear (kernels are compiled in), listed
    /// as cold for symmetry with engines that cache compiled kernels on disk.
    public static let clearableCaches: Set<String> = ["page_cache", "compiled_kernels"]

    /// Builds the engine for a spec: threads from the spec, else tuning `threads`, else
    /// `ComputeThreads.defaultCount()` (the performance cores on Apple chips, else every CPU).
    /// The count used is the engine's `threads`, recorded in the result.
    public static func make(spec: TrialSpec, tuning: [String: TuningValue]) throws -> (engine: any Engine, coldCaches: [String]) {
        if let bad = tuning.keys.sorted().first(where: { !tuningKeys.contains($0) }) {
            throw HarnessError(.badTuning, "rawloop-cpu has no tuning parameter '\(bad)' (has: \(tuningKeys.sorted().joined(separator: ", ")))")
        }
        var threads = ComputeThreads.defaultCount()
        if let t = tuning["threads"] {
            guard let v = t.intValue, v >= 1 else { throw HarnessError(.badTuning, "threads must be an integer >= 1") }
            threads = v
        }
        if let t = spec.threads { threads = t }
        var kv = RawLoopCPU.KVType.f16
        if let t = tuning["kv_cache"] {
            guard case .string(let name) = t, let k = RawLoopCPU.KVType(rawValue: name) else {
                throw HarnessError(.badTuning, "kv_cache must be \"f16\" or \"f32\"")
            }
            kv = k
        }
        if let bad = spec.clearCaches.first(where: { !clearableCaches.contains($0) }) {
            throw HarnessError(.badSpec, "rawloop-cpu cannot clear cache '\(bad)' (knows: \(clearableCaches.sorted().joined(separator: ", ")))")
        }
        // The last generated token is never fed back: prompt + decode - 1 positions; one more
        // lets the runner's overflow check see the model's own limit when the spec exceeds it.
        var kernels = KernelFamily.best
        if let t = tuning["kernels"] {
            guard case .string(let name) = t, let k = KernelFamily(rawValue: name), k == .swift || k == .best else {
                throw HarnessError(.badTuning, "kernels must be \"swift\" or, on x86-64 builds with AVX2, \"avx2\"")
            }
            kernels = k
        }
        let engine = try RawLoopCPU(modelPath: spec.model, threads: threads, kvCache: kv, kernels: kernels,
                                    maxPositions: spec.promptTokens + spec.decodeTokens,
                                    dropPageCache: spec.clearCaches.contains("page_cache"))
        return (engine, spec.clearCaches.sorted())
    }
}
