import HarnessCore

extension RawLoopMetal {
    /// `page_cache`: the model file's pages are dropped before the load (Linux only; a no-op on
    /// Apple platforms). `compiled_kernels`: the shader library is compiled in-process at load,
    /// never read from a disk cache, so it is always cold.
    public static let clearableCaches: Set<String> = ["page_cache", "compiled_kernels"]

    public static func make(spec: TrialSpec, tuning: [String: TuningValue]) throws -> (engine: any Engine, coldCaches: [String]) {
        if let bad = tuning.keys.sorted().first(where: { !tuningKeys.contains($0) }) {
            throw HarnessError(.badTuning, "rawloop-metal has no tuning parameter '\(bad)'")
        }
        if let bad = spec.clearCaches.first(where: { !clearableCaches.contains($0) }) {
            throw HarnessError(.badSpec, "rawloop-metal cannot clear cache '\(bad)'")
        }
        // The KV cache and scores hold the run's positions, not the model's trained context:
        // prompt + decode - 1 are used; one more lets the runner's overflow check see the
        // model's own limit when the spec exceeds it (as `RawLoopCPU.make`).
        let engine = try RawLoopMetal(modelPath: spec.model, maxPositions: spec.promptTokens + spec.decodeTokens,
                                      dropPageCache: spec.clearCaches.contains("page_cache"))
        return (engine, spec.clearCaches.sorted())
    }
}
