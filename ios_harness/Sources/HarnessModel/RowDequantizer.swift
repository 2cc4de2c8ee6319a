import HarnessCore

extension GGMLType {
    /// One row of `cols` elements at `row` as floats (an embedding lookup). Quantized rows are in
    /// GGUF order (blocks of f16 scale then quants), or with `scalesFirst` in the CPU kernels'
    /// repacked order (all scales, then all quants): the same bytes either way.
    public func dequantize(row: UnsafeRawPointer, cols: Int, scalesFirst: Bool = false, into out: UnsafeMutablePointer<Float>) {
        let nb = cols / 32
        // Byte offsets of block b's scale and quants.
        func at(_ b: Int, _ quant: Int) -> (scale: Int, quants: Int) {
            scalesFirst ? (b * 2, nb * 2 + b * quant) : (b * (quant + 2), b * (quant + 2) + 2)
        }
        switch self {
        case .f32:
            out.update(from: row.assumingMemoryBound(to: Float.self), count: cols)
        case .q8_0:
            for b in 0..<nb {
                let (s, q) = at(b, 32)
                let d = Self.half(row + s)
                for i in 0..<32 { out[b * 32 + i] = d * Float(row.load(fromByteOffset: q + i, as: Int8.self)) }
            }
        case .q4_0:
            for b in 0..<nb {
                let (s, qs) = at(b, 16)
                let d = Self.half(row + s)
                for j in 0..<16 {
                    let q = row.load(fromByteOffset: qs + j, as: UInt8.self)
                    out[b * 32 + j] = d * Float(Int(q & 0xF) - 8)
                    out[b * 32 + j + 16] = d * Float(Int(q >> 4) - 8)
                }
            }
        case .f16:
            fatalError("F16 matrices are rejected at load")
        }
    }

    /// An f16 scale as a float, exactly (normals, subnormals, zero; not inf/NaN), in integer
    /// arithmetic (why: `Kernels.half` in HarnessCPU, whose hot loops inline this).
    @inlinable @inline(__always)
    public static func half(_ p: UnsafeRawPointer) -> Float {
        let h = UInt32(p.loadUnaligned(as: UInt16.self))
        let magnitude = Float(bitPattern: (h & 0x7FFF) &<< 13) * 0x1p112
        return Float(bitPattern: magnitude.bitPattern | ((h & 0x8000) &<< 16))
    }
}

extension GGUFFile {
    /// Row `row` of a 2-D F32 / Q8_0 / Q4_0 tensor (GGUF order) as floats (an embedding lookup).
    public func dequantizeRow(of name: String, row: Int, into out: UnsafeMutablePointer<Float>) throws {
        guard let t = tensors[name], t.dims.count == 2 else { throw HarnessError(.badModel, "GGUF lacks 2-D tensor \(name)") }
        let m = try MatrixLayout(t, rows: t.dims[1], cols: t.dims[0])
        guard row >= 0, row < m.rows else { throw HarnessError(.badSpec, "row \(row) outside \(name)") }
        m.type.dequantize(row: data(t) + row * m.rowBytes, cols: m.cols, into: out)
    }
}
