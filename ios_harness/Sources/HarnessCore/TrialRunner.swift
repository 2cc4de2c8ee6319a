/// Runs one spec on one loaded engine: trial1, then the warm repetitions.
///
/// Each generation: `reset`, t = 0 at prompt submission, prefill (its greedy token is the first
/// generated token), then `decode_tokens - 1` decode steps, each token stamped on arrival.
/// Thermal samples (each phase boundary, plus every change the probe observed) are stamped in
/// ns since the runner started, on the same clock.
public struct TrialRunner {
    public let clock: any MonotonicClock
    public let thermal: any ThermalProbe

    public init(clock: any MonotonicClock = SystemClock(), thermal: any ThermalProbe = NoThermalProbe()) {
        self.clock = clock
        self.thermal = thermal
    }

    /// Checks the spec against the engine before any timed work.
    public func check(_ spec: TrialSpec, on engine: any Engine) throws -> [Int32] {
        let ids = spec.promptIds ?? PromptMaker.ids(seed: spec.seed, count: spec.promptTokens, vocab: engine.vocabSize)
        if let bad = ids.first(where: { $0 < 0 || $0 >= engine.vocabSize }) {
            throw HarnessError(.badSpec, "prompt id \(bad) is outside the vocabulary (0..<\(engine.vocabSize))")
        }
        // The last generated token is never fed back, so it takes no position.
        let positions = spec.promptTokens + spec.decodeTokens - 1
        if positions > engine.contextLength {
            throw HarnessError(
                .contextOverflow,
                "prompt_tokens + decode_tokens - 1 = \(positions) exceeds the context of \(engine.contextLength)")
        }
        return ids.map { Int32($0) }
    }

    public func run(_ spec: TrialSpec, on engine: any Engine, base: TrialResult) throws -> TrialResult {
        let prompt = try check(spec, on: engine)
        let start = clock.nowNs()
        var result = base
        var samples: [ThermalSample] = []
        func sample() {
            for change in thermal.drainChanges() where change.tNs >= start {
                samples.append(ThermalSample(tNs: Int(change.tNs - start), state: change.state))
            }
            if let s = thermal.current() {
                samples.append(ThermalSample(tNs: Int(clock.nowNs() - start), state: s))
            }
        }
        _ = thermal.drainChanges()
        sample()
        result.trial1 = try generate(prompt, decodeTokens: spec.decodeTokens, chunkWidth: spec.chunkWidth, on: engine)
        sample()
        for _ in 0..<spec.warmRepetitions {
            result.warm.append(try generate(prompt, decodeTokens: spec.decodeTokens, chunkWidth: spec.chunkWidth, on: engine))
            sample()
        }
        result.status = .ok
        result.thermal = samples
        result.threads = engine.threads
        result.bytesPerDecodeToken = engine.bytesPerDecodeToken
        result.bytesPerPrefillToken = engine.bytesPerPrefillToken(chunkWidth: spec.chunkWidth)
        return result
    }

    public func generate(_ prompt: [Int32], decodeTokens: Int, chunkWidth: Int, on engine: any Engine) throws -> Generation {
        engine.reset()
        var ids: [Int] = []
        var times: [Int] = []
        ids.reserveCapacity(decodeTokens)
        times.reserveCapacity(decodeTokens)
        let t0 = clock.nowNs()
        var token = try engine.prefill(prompt, chunkWidth: chunkWidth)
        let t1 = clock.nowNs()
        ids.append(Int(token))
        times.append(Int(t1 - t0))
        for _ in 1..<decodeTokens {
            token = try engine.decode(token)
            times.append(Int(clock.nowNs() - t0))
            ids.append(Int(token))
        }
        return Generation(prefillNs: Int(t1 - t0), ttftNs: Int(t1 - t0), tokenIds: ids, tokenTimesNs: times)
    }
}
