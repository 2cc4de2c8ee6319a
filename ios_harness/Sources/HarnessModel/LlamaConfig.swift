import HarnessCore

/// Hyperparameters of a llama-architecture GGUF (`llama.*` keys).
public struct LlamaConfig: Equatable, Sendable {
    public var dim: Int
    public var layers: Int
    public var heads: Int
    public var kvHeads: Int
    public var hidden: Int
    public var vocab: Int
    public var contextLength: Int
    public var ropeBase: Float
    public var normEps: Float

    public var headDim: Int { dim / heads }
    public var kvDim: Int { kvHeads * headDim }

    public init(file: GGUFFile) throws {
        let meta = file.metadata
        guard let arch = meta["general.architecture"]?.asString else {
            throw HarnessError(.badModel, "GGUF has no general.architecture")
        }
        guard arch == "llama" else { throw HarnessError(.badModel, "architecture '\(arch)' is not llama") }
        func int(_ key: String) throws -> Int {
            guard let v = meta["llama.\(key)"]?.asInt, v > 0 else { throw HarnessError(.badModel, "GGUF lacks llama.\(key)") }
            return v
        }
        dim = try int("embedding_length")
        layers = try int("block_count")
        heads = try int("attention.head_count")
        kvHeads = meta["llama.attention.head_count_kv"]?.asInt ?? heads
        hidden = try int("feed_forward_length")
        contextLength = try int("context_length")
        ropeBase = Float(meta["llama.rope.freq_base"]?.asDouble ?? 10_000)
        normEps = Float(meta["llama.attention.layer_norm_rms_epsilon"]?.asDouble ?? 1e-5)
        guard let embed = file.tensors["token_embd.weight"], embed.dims.count == 2 else {
            throw HarnessError(.badModel, "GGUF lacks token_embd.weight")
        }
        vocab = embed.dims[1]
        guard dim % heads == 0, headDim % 2 == 0, kvHeads > 0, heads % kvHeads == 0 else {
            throw HarnessError(.badModel, "heads \(heads) / kv heads \(kvHeads) do not divide dim \(dim)")
        }
        guard dim % 32 == 0, hidden % 32 == 0 else {
            throw HarnessError(.badModel, "dim \(dim) and hidden \(hidden) must be multiples of 32")
        }
        if let rot = meta["llama.rope.dimension_count"]?.asInt, rot != headDim {
            throw HarnessError(.badModel, "partial rotary (\(rot) of \(headDim)) is not supported")
        }
    }
}
