import HarnessCore

/// A row-major weight matrix inside a loaded GGUF file: `rows` outputs of `cols` inputs.
struct WeightMatrix {
    let name: String
    let data: UnsafeRawPointer
    let rows: Int
    let cols: Int
    let type: GGMLType
    let rowBytes: Int

    var byteCount: Int { rows * rowBytes }

    init(_ tensor: GGUFTensor, in file: GGUFFile, rows: Int, cols: Int) throws {
        guard tensor.dims.count == 2, tensor.dims[0] == cols, tensor.dims[1] == rows else {
            throw HarnessError(.badModel, "tensor \(tensor.name) has shape \(tensor.dims), expected [\(cols), \(rows)]")
        }
        guard [.f32, .q8_0, .q4_0].contains(tensor.type) else {
            throw HarnessError(.badModel, "tensor \(tensor.name) is \(tensor.type); rawloop-cpu reads Q8_0, Q4_0 and F32 matrices")
        }
        guard cols % 32 == 0 else { throw HarnessError(.badModel, "tensor \(tensor.name) rows are not a multiple of 32") }
        name = tensor.name
        data = file.data(tensor)
        self.rows = rows
        self.cols = cols
        type = tensor.type
        rowBytes = cols / type.block.elements * type.block.bytes
    }

    /// out[c * outStride + r] = row r . column c, for r in `range`, c in 0..<input.columns.
    /// Columns go in groups of four sharing each weight load (the row stays in L1 across the
    /// chunk); the per-column arithmetic is the one-column kernel's.
    func multiply(rows range: Range<Int>, input: PreparedInput, out: UnsafeMutablePointer<Float>, outStride: Int) {
        let columns = input.columns
        let nb = input.blocks
        switch type {
        case .q8_0:
            let x = UnsafePointer(input.q8), xd = UnsafePointer(input.scales)
            let xs = input.q8Stride, ds = input.scaleStride
            for r in range {
                let row = data + r &* rowBytes
                var c = 0
                while c &+ 4 <= columns {
                    let v = Q8_0Kernel.dot4(row, blocks: nb, x: x + c &* xs, colStride: xs, xd: xd + c &* ds, scaleStride: ds)
                    store(v, out, c, outStride, r)
                    c &+= 4
                }
                while c < columns {
                    out[c &* outStride &+ r] = Q8_0Kernel.dot1(row, blocks: nb, x: x + c &* xs, xd: xd + c &* ds)
                    c &+= 1
                }
            }
        case .q4_0:
            let x = UnsafePointer(input.q4), xd = UnsafePointer(input.scales)
            let xs = input.q4Stride, ds = input.scaleStride
            for r in range {
                let row = data + r &* rowBytes
                var c = 0
                while c &+ 4 <= columns {
                    let v = Q4_0Kernel.dot4(row, blocks: nb, x: x + c &* xs, colStride: xs, xd: xd + c &* ds, scaleStride: ds)
                    store(v, out, c, outStride, r)
                    c &+= 4
                }
                while c < columns {
                    out[c &* outStride &+ r] = Q4_0Kernel.dot1(row, blocks: nb, x: x + c &* xs, xd: xd + c &* ds)
                    c &+= 1
                }
            }
        case .f32:
            for r in range {
                let row = data + r &* rowBytes
                for c in 0..<columns {
                    out[c &* outStride &+ r] = F32Kernel.dot1(row, count: cols, x: input.floats + c &* cols)
                }
            }
        case .f16:
            fatalError("F16 matrices are rejected at load")
        }
    }

    @inline(__always)
    private func store(_ v: (Float, Float, Float, Float), _ out: UnsafeMutablePointer<Float>, _ c: Int, _ stride: Int, _ r: Int) {
        out[c &* stride &+ r] = v.0
        out[(c &+ 1) &* stride &+ r] = v.1
        out[(c &+ 2) &* stride &+ r] = v.2
        out[(c &+ 3) &* stride &+ r] = v.3
    }

    /// Row `r` as floats (the embedding lookup).
    func dequantizeRow(_ r: Int, into out: UnsafeMutablePointer<Float>) {
        let row = data + r * rowBytes
        switch type {
        case .f32:
            out.update(from: row.assumingMemoryBound(to: Float.self), count: cols)
        case .q8_0:
            for b in 0..<(cols / 32) {
                let blk = row + b * 34
                let d = Kernels.half(blk)
                for i in 0..<32 { out[b * 32 + i] = d * Float(blk.load(fromByteOffset: 2 + i, as: Int8.self)) }
            }
        case .q4_0:
            for b in 0..<(cols / 32) {
                let blk = row + b * 18
                let d = Kernels.half(blk)
                for j in 0..<16 {
                    let q = blk.load(fromByteOffset: 2 + j, as: UInt8.self)
                    out[b * 32 + j] = d * Float(Int(q & 0xF) - 8)
                    out[b * 32 + j + 16] = d * Float(Int(q >> 4) - 8)
                }
            }
        case .f16:
            fatalError("F16 matrices are rejected at load")
        }
    }
}
