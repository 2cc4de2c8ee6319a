import HarnessCore
import llama

/// The weight bytes a forward pass reads, counted from the file's tensor table by ggml's GGUF
/// reader (metadata only, no tensor data): the same rule as the raw loops' and orch's
/// `gguf_bytes_per_token`. A decode token reads every tensor but the embedding, one embedding row,
/// and the head (the embedding again when tied); a prefill chunk of M tokens reads the layers once.
public struct LlamaWeightBytes: Sendable, Equatable {
    /// Every tensor but the embedding, the head and the final norm: the layer stack.
    public let layers: Int
    public let embedRow: Int
    public let head: Int
    public let outputNorm: Int

    public var perDecodeToken: Int { embedRow + layers + outputNorm + head }

    public func perPrefillToken(chunkWidth m: Int) -> Int { embedRow + (layers + m - 1) / max(1, m) }

    /// `vocab`: the model's vocabulary as llama.cpp loaded it (it checks the embedding is
    /// [dim, vocab], so one row is the embedding's bytes / vocab).
    public init(path: String, vocab: Int) throws {
        guard let g = gguf_init_from_file(path, gguf_init_params(no_alloc: true, ctx: nil)) else {
            throw HarnessError(.badModel, "ggml cannot read the GGUF header of \(path): \(LlamaLog.recent())")
        }
        defer { gguf_free(g) }
        var sizes: [String: Int] = [:]
        var embed: Int?
        for i in 0..<gguf_get_n_tensors(g) {
            let name = String(cString: gguf_get_tensor_name(g, i))
            sizes[name] = gguf_get_tensor_size(g, i)
            if name == "token_embd.weight" { embed = gguf_get_tensor_size(g, i) }
        }
        guard let embed else { throw HarnessError(.badModel, "\(path) has no token_embd.weight") }
        embedRow = embed / max(1, vocab)
        head = sizes["output.weight"] ?? embed
        outputNorm = sizes["output_norm.weight"] ?? 0
        layers = sizes.filter { !["token_embd.weight", "output.weight", "output_norm.weight"].contains($0.key) }.values.reduce(0, +)
    }
}
