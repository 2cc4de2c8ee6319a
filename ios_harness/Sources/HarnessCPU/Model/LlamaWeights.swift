import HarnessCore

/// Every weight of a llama model, pointing into the loaded GGUF file.
struct LlamaWeights {
    struct Layer {
        let attnNorm: UnsafePointer<Float>
        var q, k, v, o: WeightMatrix
        let ffnNorm: UnsafePointer<Float>
        var gate, up, down: WeightMatrix
    }

    private(set) var embed: WeightMatrix
    private(set) var layers: [Layer]
    let outputNorm: UnsafePointer<Float>
    /// `output.weight`, or the embedding when the head is tied.
    private(set) var head: WeightMatrix
    let tied: Bool

    init(file: GGUFFile, config c: LlamaConfig) throws {
        func tensor(_ name: String) throws -> GGUFTensor {
            guard let t = file.tensors[name] else { throw HarnessError(.badModel, "GGUF lacks tensor \(name)") }
            return t
        }
        func matrix(_ name: String, _ rows: Int, _ cols: Int) throws -> WeightMatrix {
            try WeightMatrix(tensor(name), in: file, rows: rows, cols: cols)
        }
        func norm(_ name: String) throws -> UnsafePointer<Float> {
            let t = try tensor(name)
            guard t.type == .f32, t.dims == [c.dim] else {
                throw HarnessError(.badModel, "norm \(name) is \(t.type) \(t.dims), expected F32 [\(c.dim)]")
            }
            return file.data(t).assumingMemoryBound(to: Float.self)
        }
        embed = try matrix("token_embd.weight", c.vocab, c.dim)
        layers = try (0..<c.layers).map { i in
            let p = "blk.\(i)."
            return Layer(
                attnNorm: try norm(p + "attn_norm.weight"),
                q: try matrix(p + "attn_q.weight", c.dim, c.dim),
                k: try matrix(p + "attn_k.weight", c.kvDim, c.dim),
                v: try matrix(p + "attn_v.weight", c.kvDim, c.dim),
                o: try matrix(p + "attn_output.weight", c.dim, c.dim),
                ffnNorm: try norm(p + "ffn_norm.weight"),
                gate: try matrix(p + "ffn_gate.weight", c.hidden, c.dim),
                up: try matrix(p + "ffn_up.weight", c.hidden, c.dim),
                down: try matrix(p + "ffn_down.weight", c.dim, c.hidden))
        }
        outputNorm = try norm("output_norm.weight")
        if file.tensors["output.weight"] != nil {
            head = try matrix("output.weight", c.vocab, c.dim)
            tied = false
        } else {
            head = embed
            tied = true
        }
    }

    /// Bytes of every matrix one layer stack pass reads, norms included.
    var layerBytes: Int {
        layers.reduce(0) { total, l in
            total + [l.q, l.k, l.v, l.o, l.gate, l.up, l.down].reduce(0) { $0 + $1.byteCount } + 2 * embed.cols * 4
        }
    }

    /// Weight bytes read for one decode token: embedding row, all layers, final norm, head.
    var bytesPerDecodeToken: Int {
        embed.rowBytes + layerBytes + embed.cols * 4 + head.byteCount
    }

    /// Weight bytes per prompt token at chunk width m: the layers are read once per chunk; the
    /// head, read once per prompt for the last token only, is left out.
    func bytesPerPrefillToken(chunkWidth m: Int) -> Int {
        embed.rowBytes + (layerBytes + m - 1) / m
    }

    /// Puts every quantized matrix into the kernels' row order, in place, each tensor once
    /// (a tied head is the embedding).
    mutating func repack() {
        embed.repack()
        if tied { head = embed } else { head.repack() }
        layers = layers.map { l in
            var l = l
            l.q.repack(); l.k.repack(); l.v.repack(); l.o.repack()
            l.gate.repack(); l.up.repack(); l.down.repack()
            return l
        }
    }

    var weightTypes: Set<GGMLType> {
        var s: Set<GGMLType> = [head.type]
        for l in layers { for m in [l.q, l.k, l.v, l.o, l.gate, l.up, l.down] { s.insert(m.type) } }
        return s
    }
}

/// The checks and byte counts of `LlamaWeights`, for engines that keep their own copy of the
/// weights (the Metal raw loop): every tensor present with the right shape and a supported type.
public struct LlamaLayout: Sendable {
    public let layerBytes: Int
    public let embedRowBytes: Int
    public let bytesPerDecodeToken: Int
    public let tiedHead: Bool

    public init(file: GGUFFile, config: LlamaConfig) throws {
        let w = try LlamaWeights(file: file, config: config)
        layerBytes = w.layerBytes
        embedRowBytes = w.embed.rowBytes
        bytesPerDecodeToken = w.bytesPerDecodeToken
        tiedHead = w.tied
    }
}

extension GGUFFile {
    /// Row `row` of a 2-D F32 / Q8_0 / Q4_0 tensor as floats (an embedding lookup).
    public func dequantizeRow(of name: String, row: Int, into out: UnsafeMutablePointer<Float>) throws {
        guard let t = tensors[name], t.dims.count == 2 else { throw HarnessError(.badModel, "GGUF lacks 2-D tensor \(name)") }
        let m = try WeightMatrix(t, in: self, rows: t.dims[1], cols: t.dims[0])
        guard row >= 0, row < m.rows else { throw HarnessError(.badSpec, "row \(row) outside \(name)") }
        m.dequantizeRow(row, into: out)
    }
}
