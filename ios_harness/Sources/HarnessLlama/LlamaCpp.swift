import Foundation
import HarnessCore
import llama

/// llama.cpp behind the harness's `Engine`: the GGUF loaded through its C API, the spec's prompt ids
/// fed in chunks, greedy decode (argmax over the last logits, the first index on ties, as the raw
/// loops and numpy do), so the trial runner stamps its tokens exactly as it stamps the raw loop's.
///
/// The same calls run on Linux (libllama of the llamacpp runtime environment) and on iOS (the
/// XCFramework, whose Metal backend takes the layers by llama.cpp's own default).
public final class LlamaCpp: Engine {
    public static let engineName = "llamacpp"
    /// Bumped when this wrapper changes what it asks of llama.cpp.
    public static let engineVersion = "llamacpp 2"

    public let name = LlamaCpp.engineName
    public let version: String
    public let contextLength: Int
    public let vocabSize: Int
    public let threads: Int?
    /// Tokens per `llama_decode` call in prefill (n_batch = n_ubatch: weights read once per chunk).
    public let batch: Int
    /// What the context was asked for (llama.cpp resolves `auto` when it makes the context).
    public let flashAttention: FlashAttention
    /// Weight bytes per token, counted from the file by llama.cpp's own GGUF reader.
    public let weights: LlamaWeightBytes
    public var bytesPerDecodeToken: Int { weights.perDecodeToken }
    public func bytesPerPrefillToken(chunkWidth: Int) -> Int { weights.perPrefillToken(chunkWidth: min(max(1, chunkWidth), batch)) }

    private let model: OpaquePointer
    private let context: OpaquePointer

    /// Loads `modelPath` for `positions` positions on `threads` CPU threads. `repack` turns on
    /// llama.cpp's extra buffer types (the CPU weight repack; off by default as in orch's
    /// out-of-process adapter: it faults on AMX-capable CPUs for quantized models). `flashAttention`:
    /// off by default as in that adapter (llama-cpp-python asks for it off unless told otherwise,
    /// where llama.cpp's own default is auto, which turns it on for the CPU backend).
    public init(modelPath: String, threads: Int, positions: Int, batch: Int, repack: Bool = false,
                flashAttention: FlashAttention = .off, dropPageCache: Bool = false) throws {
        LlamaLog.start()
        guard FileManager.default.fileExists(atPath: modelPath) else {
            throw HarnessError(.modelNotFound, "cannot open model \(modelPath): no such file")
        }
        if dropPageCache { PageCache.drop(modelPath) }
        LlamaLog.clear()
        var mp = llama_model_default_params()
        mp.use_extra_bufts = repack
        guard let m = llama_model_load_from_file(modelPath, mp) else {
            throw HarnessError(.badModel, "llama.cpp cannot load \(modelPath): \(LlamaLog.recent())")
        }
        model = m
        var cp = llama_context_default_params()
        cp.n_ctx = UInt32(max(1, positions))
        cp.n_batch = UInt32(max(1, batch))
        cp.n_ubatch = UInt32(max(1, batch))
        cp.n_threads = Int32(threads)
        cp.n_threads_batch = Int32(threads)
        cp.no_perf = true
        cp.flash_attn_type = flashAttention.llama
        guard let c = llama_init_from_model(m, cp) else {
            llama_model_free(m)
            throw HarnessError(.outOfMemory, "llama.cpp cannot make a context of \(positions) positions: \(LlamaLog.recent())")
        }
        context = c
        self.threads = threads
        self.batch = Int(cp.n_batch)
        self.flashAttention = flashAttention
        // llama.cpp rounds the context up (to 256) and runs past the trained context with a
        // warning; the raw loops refuse beyond it, so the same spec fails alike on both.
        contextLength = min(Int(llama_n_ctx(c)), Int(llama_model_n_ctx_train(m)))
        vocabSize = Int(llama_vocab_n_tokens(llama_model_get_vocab(m)))
        do {
            weights = try LlamaWeightBytes(path: modelPath, vocab: vocabSize)
        } catch {
            llama_free(c)
            llama_model_free(m)
            throw error
        }
        let build = LlamaBuild.current
        version = "\(LlamaCpp.engineVersion) (llama.cpp \(build.commit), ggml \(build.ggmlVersion); "
            + "flash attention \(flashAttention.rawValue); \(build.systemInfo))"
    }

    deinit {
        llama_free(context)
        llama_model_free(model)
    }

    public func reset() {
        llama_memory_clear(llama_get_memory(context), true)
    }

    public func prefill(_ tokens: [Int32], chunkWidth: Int) throws -> Int32 {
        guard !tokens.isEmpty else { throw HarnessError(.badSpec, "an empty prompt") }
        let width = min(max(1, chunkWidth), batch)
        var ids = tokens
        try ids.withUnsafeMutableBufferPointer { buf in
            var start = 0
            while start < buf.count {
                let n = min(width, buf.count - start)
                try run(buf.baseAddress! + start, n, at: start)
                start += n
            }
        }
        return try greedy()
    }

    public func decode(_ token: Int32) throws -> Int32 {
        var t = token
        try run(&t, 1, at: nil)
        return try greedy()
    }

    /// One `llama_decode` of `n` tokens; its return codes as typed errors.
    private func run(_ tokens: UnsafeMutablePointer<llama_token>, _ n: Int, at position: Int?) throws {
        let rc = llama_decode(context, llama_batch_get_one(tokens, Int32(n)))
        guard rc != 0 else { return }
        let why = LlamaLog.recent()
        switch rc {
        case 1:
            throw HarnessError(.contextOverflow, "llama.cpp found no KV slot for \(n) tokens (context \(contextLength)): \(why)")
        case 2:
            throw HarnessError(.interrupted, "llama.cpp aborted the batch: \(why)")
        case -1:
            throw HarnessError(.badSpec, "llama.cpp refused the batch of \(n) tokens\(position.map { " at \($0)" } ?? ""): \(why)")
        default:
            throw HarnessError(.engineFailure, "llama_decode returned \(rc): \(why)")
        }
    }

    /// Argmax of the last token's logits; the first index on ties.
    private func greedy() throws -> Int32 {
        guard let logits = llama_get_logits_ith(context, -1) else {
            throw HarnessError(.engineFailure, "llama.cpp has no logits for the last token: \(LlamaLog.recent())")
        }
        var best = 0
        var top = logits[0]
        for i in 1..<vocabSize where logits[i] > top {
            top = logits[i]
            best = i
        }
        return Int32(best)
    }
}
