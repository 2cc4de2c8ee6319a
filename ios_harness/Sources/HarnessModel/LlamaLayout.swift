import HarnessCore

/// One weight matrix of a llama GGUF, checked: `rows` outputs of `cols` inputs, a type the raw
/// loops read (F32, Q8_0, Q4_0), rows a whole number of 32-blocks.
public struct MatrixLayout: Sendable {
    public let tensor: GGUFTensor
    public let rows: Int
    public let cols: Int
    /// Bytes of one row in the file.
    public let rowBytes: Int

    public var name: String { tensor.name }
    public var type: GGMLType { tensor.type }
    public var byteCount: Int { rows * rowBytes }

    public init(_ tensor: GGUFTensor, rows: Int, cols: Int) throws {
        guard tensor.dims.count == 2, tensor.dims[0] == cols, tensor.dims[1] == rows else {
            throw HarnessError(.badModel, "tensor \(tensor.name) has shape \(tensor.dims), expected [\(cols), \(rows)]")
        }
        guard [.f32, .q8_0, .q4_0].contains(tensor.type) else {
            throw HarnessError(.badModel, "tensor \(tensor.name) is \(tensor.type); rawloop-cpu reads Q8_0, Q4_0 and F32 matrices")
        }
        guard cols % 32 == 0 else { throw HarnessError(.badModel, "tensor \(tensor.name) rows are not a multiple of 32") }
        self.tensor = tensor
        self.rows = rows
        self.cols = cols
        rowBytes = cols / tensor.type.block.elements * tensor.type.block.bytes
    }
}

/// Every weight of a llama model located and checked (present, right shape, supported type), and
/// the weight bytes a forward pass reads. The engines keep their own copies or views of the bytes.
public struct LlamaLayout: Sendable {
    public struct Layer: Sendable {
        public let attnNorm: GGUFTensor
        public let q, k, v, o: MatrixLayout
        public let ffnNorm: GGUFTensor
        public let gate, up, down: MatrixLayout

        public var matrices: [MatrixLayout] { [q, k, v, o, gate, up, down] }
    }

    public let embed: MatrixLayout
    public let layers: [Layer]
    public let outputNorm: GGUFTensor
    /// `output.weight`, or the embedding when the head is tied.
    public let head: MatrixLayout
    public let tiedHead: Bool

    public init(file: GGUFFile, config c: LlamaConfig) throws {
        func tensor(_ name: String) throws -> GGUFTensor {
            guard let t = file.tensors[name] else { throw HarnessError(.badModel, "GGUF lacks tensor \(name)") }
            return t
        }
        func matrix(_ name: String, _ rows: Int, _ cols: Int) throws -> MatrixLayout {
            try MatrixLayout(tensor(name), rows: rows, cols: cols)
        }
        func norm(_ name: String) throws -> GGUFTensor {
            let t = try tensor(name)
            guard t.type == .f32, t.dims == [c.dim] else {
                throw HarnessError(.badModel, "norm \(name) is \(t.type) \(t.dims), expected F32 [\(c.dim)]")
            }
            return t
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
            tiedHead = false
        } else {
            head = embed
            tiedHead = true
        }
    }

    /// Bytes of every matrix one layer stack pass reads, norms included.
    public var layerBytes: Int {
        layers.reduce(0) { total, l in
            total + l.matrices.reduce(0) { $0 + $1.byteCount } + 2 * embed.cols * 4
        }
    }

    public var embedRowBytes: Int { embed.rowBytes }

    /// Weight bytes read for one decode token: embedding row, all layers, final norm, head.
    public var bytesPerDecodeToken: Int {
        embed.rowBytes + layerBytes + embed.cols * 4 + head.byteCount
    }

    /// Weight bytes per prompt token at chunk width m: the layers are read once per chunk; the
    /// head, read once per prompt for the last token only, is left out.
    public func bytesPerPrefillToken(chunkWidth m: Int) -> Int {
        embed.rowBytes + (layerBytes + m - 1) / m
    }

    /// The matrix types, head included.
    public var weightTypes: Set<GGMLType> {
        var s: Set<GGMLType> = [head.type]
        for l in layers { for m in l.matrices { s.insert(m.type) } }
        return s
    }
}
