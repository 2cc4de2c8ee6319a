import HarnessCore

extension LlamaCpp {
    /// Tuning parameters: `threads` (as rawloop-cpu), `n_batch` (prefill tokens per llama_decode;
    /// default the spec's chunk width, as orch's out-of-process adapter does), `repack` (llama.cpp's
    /// CPU weight repack, default false as in that adapter), `flash_attn` (false, the default, as in
    /// that adapter, whose binding turns it off; true; or "auto", llama.cpp's own default: on where
    /// the backend has it).
    public static let tuningKeys: Set<String> = ["threads", "n_batch", "repack", "flash_attn"]
    /// The raw loops' set, with the same meaning: `page_cache`, the model file's pages are dropped
    /// before the load (Linux); `compiled_kernels`, always cold: llama.cpp keeps no compiled kernels
    /// on disk (its Metal library is compiled in the process, when the context is made).
    public static let clearableCaches: Set<String> = ["page_cache", "compiled_kernels"]

    /// Builds the engine for a spec: threads from the spec, else tuning `threads`, else
    /// `ComputeThreads.defaultCount()` (the raw loop's rule, so the same spec compares the two on
    /// the same thread count); positions for the prompt and the generated tokens.
    public static func make(spec: TrialSpec, tuning: [String: TuningValue]) throws -> (engine: any Engine, coldCaches: [String]) {
        if let bad = tuning.keys.sorted().first(where: { !tuningKeys.contains($0) }) {
            throw HarnessError(.badTuning, "llamacpp has no tuning parameter '\(bad)' (has: \(tuningKeys.sorted().joined(separator: ", ")))")
        }
        var threads = ComputeThreads.defaultCount()
        if let t = tuning["threads"] {
            guard let v = t.intValue, v >= 1 else { throw HarnessError(.badTuning, "threads must be an integer >= 1") }
            threads = v
        }
        if let t = spec.threads { threads = t }
        var batch = max(1, spec.chunkWidth)
        if let t = tuning["n_batch"] {
            guard let v = t.intValue, v >= 1 else { throw HarnessError(.badTuning, "n_batch must be an integer >= 1") }
            batch = v
        }
        var repack = false
        if let t = tuning["repack"] {
            guard case .bool(let b) = t else { throw HarnessError(.badTuning, "repack must be true or false") }
            repack = b
        }
        var flash = FlashAttention.off
        if let t = tuning["flash_attn"] {
            switch t {
            case .bool(let b): flash = b ? .on : .off
            case .string("auto"): flash = .auto
            default: throw HarnessError(.badTuning, "flash_attn must be true, false or \"auto\"")
            }
        }
        if let bad = spec.clearCaches.first(where: { !clearableCaches.contains($0) }) {
            throw HarnessError(.badSpec, "llamacpp cannot clear cache '\(bad)' (knows: \(clearableCaches.sorted().joined(separator: ", ")))")
        }
        // The last generated token is never fed back: prompt + decode - 1 positions; one more lets
        // the runner's overflow check see llama.cpp's own limit when the spec exceeds it.
        let engine = try LlamaCpp(modelPath: spec.model, threads: threads, positions: spec.promptTokens + spec.decodeTokens,
                                  batch: batch, repack: repack, flashAttention: flash, dropPageCache: spec.clearCaches.contains("page_cache"))
        return (engine, spec.clearCaches.sorted())
    }
}
