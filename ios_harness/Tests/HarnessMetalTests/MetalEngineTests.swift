import Foundation
import Testing
@testable import HarnessCore
@testable import HarnessCPU
@testable import HarnessMetal

/// The Metal raw loop, its host code and its shaders, run end to end on MetalCPU and checked
/// against the CPU engine on every committed model.
@Suite struct MetalEngineTests {
    /// Chunked prefill gives the bits of M = 1 (the engine's own guarantee), and the tokens pass
    /// the token gate against the CPU engine: F32 at the same-weights tie (only the summation
    /// order differs), Q8_0 / Q4_0 at the same-class tie (the CPU engine also quantizes its
    /// activations to int8).
    @Test(arguments: Fixtures.all)
    func tokensMatchTheCPUEngine(_ model: String) throws {
        let path = Fixtures.path(model)
        let metal = try RawLoopMetal(modelPath: path, maxPositions: 64)
        let runs = try [1, 4, 16].map { try generate(metal, chunk: $0) }
        #expect(runs[1] == runs[0], "\(model): M=4 differs from M=1")
        #expect(runs[2] == runs[0], "\(model): M=16 differs from M=1")
        let cpu = try RawLoopCPU(modelPath: path, threads: 1, kvCache: .f32, maxPositions: 64)
        let margins = try TokenGate.margins(of: runs[0].tokens, prompt: Fixtures.prompt, reference: cpu)
        let tie = model.hasSuffix("F32") ? TokenGate.sameWeights : TokenGate.sameClass
        #expect(margins.max()! <= tie, "\(model): token gate margins \(margins)")
        if model.hasSuffix("F32") {
            // Same weights, same activations: the logits agree to float rounding.
            _ = try TokenGate.margins(of: [runs[0].tokens[0]], prompt: Fixtures.prompt, reference: cpu)
            let sd = standardDeviation((0..<cpu.vocabSize).map { cpu.logits[$0] })
            let gap = (0..<cpu.vocabSize).map { abs(cpu.logits[$0] - Float(bitPattern: runs[0].logits[0][$0])) }.max()!
            #expect(gap <= 1e-4 * sd, "\(model): prefill logits differ by \(gap) (sd \(sd))")
        }
    }

    func standardDeviation(_ x: [Float]) -> Float {
        let mean = x.reduce(0, +) / Float(x.count)
        return (x.map { ($0 - mean) * ($0 - mean) }.reduce(0, +) / Float(x.count)).squareRoot()
    }

    @Test func resetStartsOverAndOverflowIsTyped() throws {
        let e = try RawLoopMetal(modelPath: Fixtures.path("t2", "Q8_0"), maxPositions: 40)
        let a = try e.prefill(Fixtures.prompt, chunkWidth: 8)
        e.reset()
        #expect(try e.prefill(Fixtures.prompt, chunkWidth: 3) == a)
        #expect(e.position == Fixtures.prompt.count)
        #expect(throws: HarnessError.self) { _ = try e.prefill([Int32](repeating: 3, count: 41), chunkWidth: 16) }
        #expect(e.version.hasPrefix("rawloop-metal 1 ("))
        #expect(e.version.hasSuffix("(emulated Metal on CPU)") == MetalPlatform.emulated)
    }

    /// The trial runner over the Metal engine: a valid result, token times in order, and the
    /// command buffers' GPU times on the runner's clock, inside the generation that made them.
    @Test func trialRunnerResultAndGPUTimes() throws {
        let spec = TrialSpec(runId: "r", trialId: "metal", engine: "rawloop-metal", model: Fixtures.path("t1", "Q8_0"),
                             promptTokens: 20, decodeTokens: 8, chunkWidth: 4, warmRepetitions: 1)
        let (engine, cold) = try RawLoopMetal.make(spec: spec, tuning: [:])
        let metal = try #require(engine as? RawLoopMetal)
        #expect(cold.isEmpty && metal.contextLength == 28)
        let base = TrialResult(runId: spec.runId, trialId: spec.trialId, status: .error, engine: spec.engine,
                               engineVersion: engine.version, harnessBuild: "test", model: spec.model,
                               promptTokens: spec.promptTokens, chunkWidth: spec.chunkWidth)
        let clock = SystemClock()
        let before = Double(clock.nowNs()) / 1e9
        let result = try TrialRunner(clock: clock).run(spec, on: engine, base: base)
        let after = Double(clock.nowNs()) / 1e9
        try result.validate()
        let trial1 = try #require(result.trial1)
        #expect(result.status == .ok && result.warm.first?.tokenIds == trial1.tokenIds && trial1.tokenIds.count == 8)
        #expect(zip(trial1.tokenTimesNs, trial1.tokenTimesNs.dropFirst()).allSatisfy { $0 < $1 })
        #expect(result.threads == nil && result.bytesPerDecodeToken == metal.bytesPerDecodeToken)
        // The warm generation's command buffers: 5 prefill chunks of 4, then 7 decode steps.
        #expect(metal.gpuTimes.count == 12)
        var last = before
        for (start, end) in metal.gpuTimes {
            #expect(last <= start && start <= end && end <= after)
            last = end
        }
    }

    @Test func tuningAndCachesAreTyped() throws {
        let s = TrialSpec(runId: "r", trialId: "t", engine: "rawloop-metal", model: Fixtures.path("t1", "Q8_0"),
                          promptTokens: 4, decodeTokens: 4)
        #expect(throws: HarnessError.self) { _ = try RawLoopMetal.make(spec: s, tuning: ["threads": .int(2)]) }
        var c = s
        c.clearCaches = ["gpu_shader_cache"]
        #expect(throws: HarnessError.self) { _ = try RawLoopMetal.make(spec: c, tuning: [:]) }
        c.clearCaches = ["compiled_kernels", "page_cache"]
        #expect(try RawLoopMetal.make(spec: c, tuning: [:]).coldCaches == ["compiled_kernels", "page_cache"])
    }
}
