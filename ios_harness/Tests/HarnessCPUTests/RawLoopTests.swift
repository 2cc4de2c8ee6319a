import Foundation
import Testing
@testable import HarnessCore
@testable import HarnessCPU

/// The CPU raw loop on the committed tiny models.
@Suite(.serialized) struct RawLoopTests {
    struct Run: Equatable {
        var tokens: [Int32]
        var logits: [[UInt32]]
    }

    /// Greedy generation recording the bits of every logit vector (prefill's last, then each decode).
    func generate(_ path: String, threads: Int, chunk: Int, prompt: [Int32], steps: Int,
                  kv: RawLoopCPU.KVType = .f32, kernels: KernelFamily = .best) throws -> Run {
        let e = try RawLoopCPU(modelPath: path, threads: threads, kvCache: kv, kernels: kernels)
        func bits() -> [UInt32] { (0..<e.vocabSize).map { e.logits[$0].bitPattern } }
        var token = try e.prefill(prompt, chunkWidth: chunk)
        var run = Run(tokens: [token], logits: [bits()])
        for _ in 1..<steps {
            token = try e.decode(token)
            run.tokens.append(token)
            run.logits.append(bits())
        }
        return run
    }

    static let prompt: [Int32] = PromptMaker.ids(seed: 11, count: 37, vocab: 272).map { Int32($0) }

    @Test(arguments: ModelFixtures.all.map { "\($0.0)/\($0.1)" })
    func chunkedPrefillIsBitIdentical(_ name: String) throws {
        let parts = name.split(separator: "/").map(String.init)
        let path = ModelFixtures.path(parts[0], parts[1])
        // Every kernel family this build has (Swift SIMD everywhere, AVX2 C on x86-64), both KV types.
        for kernels in Set([KernelFamily.swift, .best]) {
            for kv in [RawLoopCPU.KVType.f16, .f32] {
                let sequential = try generate(path, threads: 2, chunk: 1, prompt: Self.prompt, steps: 12, kv: kv, kernels: kernels)
                for m in [4, 16, 5] {
                    let chunked = try generate(path, threads: 2, chunk: m, prompt: Self.prompt, steps: 12, kv: kv, kernels: kernels)
                    #expect(chunked.tokens == sequential.tokens, "M=\(m) kv=\(kv) kernels=\(kernels)")
                    #expect(chunked.logits == sequential.logits, "M=\(m) kv=\(kv) kernels=\(kernels): logits differ")
                }
            }
        }
    }

    @Test(arguments: ModelFixtures.all.map { "\($0.0)/\($0.1)" })
    func threadCountDoesNotChangeBits(_ name: String) throws {
        let parts = name.split(separator: "/").map(String.init)
        let path = ModelFixtures.path(parts[0], parts[1])
        for kernels in Set([KernelFamily.swift, .best]) {
            let one = try generate(path, threads: 1, chunk: 4, prompt: Self.prompt, steps: 8, kernels: kernels)
            for t in [2, 3, 5] {
                #expect(try generate(path, threads: t, chunk: 4, prompt: Self.prompt, steps: 8, kernels: kernels) == one,
                        "threads=\(t) kernels=\(kernels)")
            }
        }
    }

    @Test func generationIsNotDegenerate() throws {
        let run = try generate(ModelFixtures.path("t1", "Q8_0"), threads: 2, chunk: 4, prompt: Self.prompt, steps: 16)
        #expect(Set(run.tokens).count > 4)
        #expect(run.logits[0].contains { Float(bitPattern: $0) != 0 })
    }

    @Test func resetStartsOver() throws {
        let e = try RawLoopCPU(modelPath: ModelFixtures.path("t2", "Q8_0"), threads: 2)
        let a = try e.prefill(Self.prompt, chunkWidth: 8)
        e.reset()
        #expect(try e.prefill(Self.prompt, chunkWidth: 3) == a)
        #expect(e.position == Self.prompt.count)
    }

    @Test func contextOverflowIsTyped() throws {
        let e = try RawLoopCPU(modelPath: ModelFixtures.path("t1", "Q4_0"), threads: 1)
        let long = [Int32](repeating: 3, count: e.contextLength + 1)
        #expect(throws: HarnessError.self) { _ = try e.prefill(long, chunkWidth: 16) }
    }

    @Test func bytesPerTokenCountTheWeights() throws {
        let e = try RawLoopCPU(modelPath: ModelFixtures.path("t1", "Q8_0"), threads: 1)
        let c = e.config
        let rowBytes = c.dim / 32 * 34
        let layer = (2 * c.dim + 2 * c.kvDim + 3 * c.hidden) * rowBytes + 2 * c.dim * 4
        let head = c.vocab * rowBytes
        #expect(e.bytesPerDecodeToken == rowBytes + c.layers * layer + c.dim * 4 + head)
        #expect(e.bytesPerPrefillToken(chunkWidth: 16) < e.bytesPerPrefillToken(chunkWidth: 1) / 8)
        #expect(!e.tiedHead)
        #expect(try RawLoopCPU(modelPath: ModelFixtures.path("t2", "Q8_0"), threads: 1).tiedHead)
    }

    @Test func specRunTwiceGivesTheSameTokens() throws {
        let spec = try #require(try? Data(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Fixtures/protocol/valid/spec_golden_q8_0.json")))
        var s = try ProtocolJSON.decoder().decode(TrialSpec.self, from: spec)
        s.model = ModelFixtures.path("t1", "Q8_0")
        let runs = try (0..<2).map { _ in
            let (engine, _) = try RawLoopCPU.make(spec: s, tuning: [:])
            let base = TrialResult(runId: s.runId, trialId: s.trialId, status: .error, engine: s.engine,
                                   engineVersion: engine.version, harnessBuild: "test", model: s.model,
                                   promptTokens: s.promptTokens, chunkWidth: s.chunkWidth)
            return try TrialRunner().run(s, on: engine, base: base)
        }
        #expect(runs[0].trial1?.tokenIds == runs[1].trial1?.tokenIds)
        #expect(runs[0].warm.first?.tokenIds == runs[0].trial1?.tokenIds)
        try runs[0].validate()
    }

    @Test func unknownTuningAndCachesAreTyped() throws {
        let s = TrialSpec(runId: "r", trialId: "t", engine: "rawloop-cpu", model: ModelFixtures.path("t1", "Q8_0"),
                          promptTokens: 4, decodeTokens: 4)
        #expect(throws: HarnessError.self) { _ = try RawLoopCPU.make(spec: s, tuning: ["tile": .int(4)]) }
        #expect(throws: HarnessError.self) { _ = try RawLoopCPU.make(spec: s, tuning: ["kv_cache": .string("q8")]) }
        let (e, _) = try RawLoopCPU.make(spec: s, tuning: ["kv_cache": .string("f32"), "threads": .int(1)])
        #expect(e.version.contains("kv f32") && e.threads == 1)
        #expect(throws: HarnessError.self) { _ = try RawLoopCPU.make(spec: s, tuning: ["kernels": .string("neon")]) }
        let (sw, _) = try RawLoopCPU.make(spec: s, tuning: ["kernels": .string("swift")])
        #expect(sw.version.contains("kernels swift"))
        var c = s
        c.clearCaches = ["gpu_shader_cache"]
        #expect(throws: HarnessError.self) { _ = try RawLoopCPU.make(spec: c, tuning: [:]) }
    }
}
