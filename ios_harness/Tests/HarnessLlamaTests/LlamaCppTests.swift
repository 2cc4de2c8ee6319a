import Foundation
import Testing
@testable import HarnessCore
import HarnessCPU
import HarnessModel
@testable import HarnessLlama

/// The `llamacpp` engine on the committed fixture GGUFs through the real libllama this build links
/// (no double: every test here calls llama.cpp).
@Suite struct LlamaCppTests {
    static let models = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/models")

    static func path(_ size: String, _ format: String) -> String {
        models.appendingPathComponent("llama-\(size)-s0/model-\(format).gguf").path
    }

    static func spec(_ model: String, engine: String = "llamacpp", prompt: Int = 12, decode: Int = 8, chunk: Int = 4,
                     threads: Int? = 1, warm: Int = 0, clear: [String] = [], tuning: [String: TuningValue] = [:]) -> TrialSpec {
        var s = TrialSpec(runId: "run-l", trialId: "t-\(UUID().uuidString.prefix(8))", engine: engine, model: model,
                          promptTokens: prompt, decodeTokens: decode, chunkWidth: chunk, warmRepetitions: warm,
                          seed: 7, threads: threads)
        s.clearCaches = clear
        s.tuning = tuning
        return s
    }

    /// The engines `harness` builds with this target: the CPU raw loop and llama.cpp.
    struct Engines: EngineFactory {
        var engineNames: [String] { [RawLoopCPU.engineName, LlamaCpp.engineName] }
        func make(spec: TrialSpec, tuning: [String: TuningValue]) throws -> (engine: any Engine, coldCaches: [String]) {
            spec.engine == LlamaCpp.engineName ? try LlamaCpp.make(spec: spec, tuning: tuning) : try RawLoopCPU.make(spec: spec, tuning: tuning)
        }
    }

    /// The spec through `SpecRun.produce`, the path `harness run` and the app take: an ok result or
    /// an error result.
    func run(_ spec: TrialSpec) throws -> TrialResult {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(UUID().uuidString)-spec.json")
        try ProtocolJSON.encoder().encode(spec).write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        let r = SpecRun.produce(specPath: url.path, tuningPath: nil, factory: Engines(), runner: TrialRunner())
        try r.validate()
        return r
    }

    /// On F32 weights llama.cpp and the CPU raw loop compute the same model in different float
    /// orders; on these tiny models no greedy step is near a tie, so the tokens agree exactly.
    @Test(arguments: [("t1", "F32"), ("t2", "F32")])
    func greedyTokensAgreeWithTheRawLoop(_ model: (String, String)) throws {
        let path = Self.path(model.0, model.1)
        let llama = try run(Self.spec(path, decode: 16))
        let raw = try run(Self.spec(path, engine: "rawloop-cpu", decode: 16))
        #expect(llama.status == .ok && raw.status == .ok, "\(String(describing: llama.error)) \(String(describing: raw.error))")
        #expect(llama.trial1?.tokenIds == raw.trial1?.tokenIds)
    }

    @Test func resultIsStampedByTheTrialRunner() throws {
        let path = Self.path("t1", "Q8_0")
        let r = try run(Self.spec(path, decode: 10, warm: 1, clear: ["page_cache", "compiled_kernels"]))
        #expect(r.status == .ok && r.engine == "llamacpp" && r.threads == 1, "\(String(describing: r.error))")
        #expect(r.engineVersion.hasPrefix("llamacpp 2 (llama.cpp ") && r.engineVersion.contains("ggml "), "\(r.engineVersion)")
        #expect(r.coldCaches == ["compiled_kernels", "page_cache"])
        let g = try #require(r.trial1)
        #expect(g.tokenIds.count == 10 && g.tokenTimesNs.count == 10)
        #expect(g.ttftNs == g.prefillNs && g.tokenTimesNs[0] == g.prefillNs)
        #expect(zip(g.tokenTimesNs, g.tokenTimesNs.dropFirst()).allSatisfy { $0 < $1 })
        // A fresh context per generation: the warm repetition decodes the same tokens.
        #expect(r.warm.count == 1 && r.warm[0].tokenIds == g.tokenIds)
    }

    /// Flash attention as asked (off unless the tuning says otherwise, as in orch's adapter), named
    /// in the version; on these F32 models no greedy step is near a tie, so the tokens do not change.
    @Test(arguments: [(TuningValue?.none, "off"), (.bool(false), "off"), (.bool(true), "on"), (.string("auto"), "auto")])
    func flashAttentionIsAskedForAndNamed(_ setting: (TuningValue?, String)) throws {
        let path = Self.path("t1", "F32")
        let tuning = setting.0.map { ["flash_attn": $0] } ?? [:]
        let r = try run(Self.spec(path, decode: 16, tuning: tuning))
        let off = try run(Self.spec(path, decode: 16, tuning: ["flash_attn": .bool(false)]))
        #expect(r.status == .ok, "\(String(describing: r.error))")
        #expect(r.engineVersion.contains("; flash attention \(setting.1); "), "\(r.engineVersion)")
        #expect(r.trial1?.tokenIds == off.trial1?.tokenIds)
    }

    /// Bytes per token by the raw loops' rule, counted by ggml's reader: equal to HarnessModel's count.
    @Test(arguments: [("t1", "Q8_0"), ("t1", "Q4_0"), ("t2", "Q8_0"), ("t2", "F32")])
    func bytesPerTokenMatchTheRawLoopsCount(_ model: (String, String)) throws {
        let path = Self.path(model.0, model.1)
        let file = try GGUFFile(path: path)
        let layout = try LlamaLayout(file: file, config: try LlamaConfig(file: file))
        let engine = try LlamaCpp(modelPath: path, threads: 1, positions: 32, batch: 4)
        #expect(engine.bytesPerDecodeToken == layout.bytesPerDecodeToken)
        #expect(engine.bytesPerPrefillToken(chunkWidth: 4) == layout.bytesPerPrefillToken(chunkWidth: 4))
        #expect(engine.bytesPerPrefillToken(chunkWidth: 1) == layout.bytesPerPrefillToken(chunkWidth: 1))
        #expect(engine.vocabSize == 288 || engine.vocabSize == file.tensors["token_embd.weight"]?.dims[1])
    }

    @Test func aMissingModelIsModelNotFound() throws {
        let r = try run(Self.spec("/nonexistent/model.gguf"))
        #expect(r.status == .error && r.error?.kind == .modelNotFound, "\(String(describing: r.error))")
    }

    @Test(arguments: [16, 5_000])
    func aBrokenFileIsBadModelWithLlamaCppsReason(_ keep: Int) throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: Self.path("t1", "Q4_0"))).prefix(keep)
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(UUID().uuidString)-broken.gguf")
        try Data(data).write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        let r = try run(Self.spec(url.path))
        #expect(r.error?.kind == .badModel && r.error?.message.contains("llama.cpp cannot load") == true,
                "\(String(describing: r.error))")
    }

    @Test func badTuningAndCachesAreTyped() throws {
        let path = Self.path("t1", "Q8_0")
        func kind(_ spec: TrialSpec) throws -> HarnessError.Kind? { try run(spec).error?.kind }
        #expect(try kind(Self.spec(path, tuning: ["kernels": .string("avx2")])) == .badTuning)
        #expect(try kind(Self.spec(path, tuning: ["n_batch": .int(0)])) == .badTuning)
        #expect(try kind(Self.spec(path, tuning: ["repack": .int(1)])) == .badTuning)
        #expect(try kind(Self.spec(path, tuning: ["flash_attn": .string("yes")])) == .badTuning)
        #expect(try kind(Self.spec(path, tuning: ["flash_attn": .int(1)])) == .badTuning)
        #expect(try kind(Self.spec(path, clear: ["kv_cache"])) == .badSpec)
        // The runner's checks apply as to every engine: a context the model cannot hold.
        #expect(try kind(Self.spec(path, prompt: 100, decode: 40)) == .contextOverflow)
    }

    /// A token id past the vocabulary reaches llama_decode (the runner checks the prompt, not the
    /// engine's input): llama.cpp refuses the batch and the engine says so, typed.
    @Test func llamaCppRefusingABatchIsTyped() throws {
        let engine = try LlamaCpp(modelPath: Self.path("t1", "Q8_0"), threads: 1, positions: 32, batch: 4)
        engine.reset()
        _ = try engine.prefill([1, 2, 3], chunkWidth: 4)
        #expect(throws: HarnessError.self) {
            do { _ = try engine.decode(Int32(engine.vocabSize + 5)) } catch let e as HarnessError {
                #expect(e.kind == .badSpec && e.message.contains("refused the batch"), "\(e)")
                throw e
            }
        }
    }

    @Test func theThreadCountIsTheSpecs() throws {
        let r = try run(Self.spec(Self.path("t1", "Q8_0"), decode: 4, threads: 2))
        #expect(r.threads == 2)
    }

    @Test func buildInfoNamesTheLinkedLlamaCpp() {
        let b = LlamaBuild.current
        #expect(!b.ggmlVersion.isEmpty && !b.commit.isEmpty && b.systemInfo.contains("CPU"), "\(b)")
    }
}
