import HarnessCore
import HarnessModel
import HarnessKernels

/// Which row-dot kernels run the quantized matrices.
public enum KernelFamily: String, Sendable {
    /// Swift SIMD, everywhere (int16 products).
    case swift
    /// C with AVX2 int8 dot instructions (x86-64 builds with AVX2).
    case avx2

    /// The fastest this build has.
    public static var best: KernelFamily { hk_available() != 0 ? .avx2 : .swift }
}

/// A row-major weight matrix inside a loaded GGUF file: `rows` outputs of `cols` inputs.
struct WeightMatrix {
    let name: String
    let data: UnsafeRawPointer
    let rows: Int
    let cols: Int
    let type: GGMLType
    let rowBytes: Int
    /// Whether the rows are in the kernels' order (`repack`); the GGUF order otherwise.
    private(set) var repacked = false

    var byteCount: Int { rows * rowBytes }

    init(_ m: MatrixLayout, in file: GGUFFile) {
        name = m.name
        data = file.data(m.tensor)
        rows = m.rows
        cols = m.cols
        type = m.type
        rowBytes = m.rowBytes
    }

    init(_ tensor: GGUFTensor, in file: GGUFFile, rows: Int, cols: Int) throws {
        self.init(try MatrixLayout(tensor, rows: rows, cols: cols), in: file)
    }

    /// out[c * outStride + r] = row r . column c, for r in `range`, c in 0..<input.columns.
    /// Columns go in groups of four sharing each weight load (the row stays in L1 across the
    /// chunk); the per-column arithmetic is the one-column kernel's.
    func multiply(rows range: Range<Int>, input: PreparedInput, out: UnsafeMutablePointer<Float>, outStride: Int,
                  kernels: KernelFamily = .swift) {
        precondition(repacked || type == .f32, "quantized matrices are multiplied in repacked order")
        let columns = input.columns
        let nb = input.blocks
        if kernels == .avx2, type == .q8_0 || type == .q4_0 {
            multiplyAVX2(rows: range, input: input, out: out, outStride: outStride)
            return
        }
        switch type {
        case .q8_0, .q4_0:
            let q8 = type == .q8_0
            let x = UnsafePointer(q8 ? input.q8 : input.q4), xd = UnsafePointer(input.scales)
            let xs = q8 ? input.q8Stride : input.q4Stride, ds = input.scaleStride
            withUnsafeTemporaryAllocation(of: Float.self, capacity: nb + 1) { buffer in
                let ws = buffer.baseAddress!
                for r in range {
                    // Repacked row: scales first, then quants (one forward stream).
                    let scales = data + r &* rowBytes, row = scales + nb &* 2
                    Kernels.rowScales(scales, blocks: nb, into: ws)
                    var c = 0
                    while c &+ 4 <= columns {
                        let v = q8
                            ? Q8_0Kernel.dot4(row, ws: ws, blocks: nb, x: x + c &* xs, colStride: xs, xd: xd + c &* ds, scaleStride: ds)
                            : Q4_0Kernel.dot4(row, ws: ws, blocks: nb, x: x + c &* xs, colStride: xs, xd: xd + c &* ds, scaleStride: ds)
                        store(v, out, c, outStride, r)
                        c &+= 4
                    }
                    while c < columns {
                        out[c &* outStride &+ r] = q8
                            ? Q8_0Kernel.dot1(row, ws: ws, blocks: nb, x: x + c &* xs, xd: xd + c &* ds)
                            : Q4_0Kernel.dot1(row, ws: ws, blocks: nb, x: x + c &* xs, xd: xd + c &* ds)
                        c &+= 1
                    }
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

    /// The C kernels over the same rows; `input` must be prepared with `plain`.
    private func multiplyAVX2(rows range: Range<Int>, input: PreparedInput, out: UnsafeMutablePointer<Float>, outStride: Int) {
        let columns = input.columns, nb = input.blocks
        let x = UnsafePointer(input.i8), xd = UnsafePointer(input.scales)
        let xs = input.length, ds = input.scaleStride
        let q8 = type == .q8_0
        withUnsafeTemporaryAllocation(of: Float.self, capacity: 2 * nb + 4) { buffer in
            let ws = buffer.baseAddress!, four = ws + nb
            for r in range {
                let start = data + r &* rowBytes
                let scales = start.assumingMemoryBound(to: UInt16.self)
                let row = (start + nb &* 2).assumingMemoryBound(to: UInt8.self)
                if columns == 1 {
                    // Decode: the products ws[b] * xd[b] in one vector pass, then the row dot.
                    hk_row_scales(scales, nb, xd, ws)
                    out[r] = q8 ? hk_q8_0_dot1(row, ws, nb, x) : hk_q4_0_dot1(row, ws, nb, x)
                    continue
                }
                hk_row_scales(scales, nb, nil, ws)
                var c = 0
                while c &+ 4 <= columns {
                    if q8 {
                        hk_q8_0_dot4(row, ws, nb, x + c &* xs, xs, xd + c &* ds, ds, four)
                    } else {
                        hk_q4_0_dot4(row, ws, nb, x + c &* xs, xs, xd + c &* ds, ds, four)
                    }
                    store((four[0], four[1], four[2], four[3]), out, c, outStride, r)
                    c &+= 4
                }
                // Leftover columns: the same products, one column at a time.
                while c < columns {
                    let s = four + 4
                    for b in 0..<nb { s[b] = ws[b] * xd[c &* ds &+ b] }
                    out[c &* outStride &+ r] = q8 ? hk_q8_0_dot1(row, s, nb, x + c &* xs) : hk_q4_0_dot1(row, s, nb, x + c &* xs)
                    c &+= 1
                }
            }
        }
    }

    @inline(__always)
    private func store(_ v: (Float, Float, Float, Float), _ out: UnsafeMutablePointer<Float>, _ c: Int, _ stride: Int, _ r: Int) {
        out[c &* stride &+ r] = v.0
        out[(c &+ 1) &* stride &+ r] = v.1
        out[(c &+ 2) &* stride &+ r] = v.2
        out[(c &+ 3) &* stride &+ r] = v.3
    }

    /// Row `r` as floats (the embedding lookup), in either order.
    func dequantizeRow(_ r: Int, into out: UnsafeMutablePointer<Float>) {
        type.dequantize(row: data + r * rowBytes, cols: cols, scalesFirst: repacked, into: out)
    }

    /// Reorders every GGUF row of `rows` x `cols` at `data` in place from blocks of
    /// (f16 scale, quants) to (all scales, all quants): same bytes, vector-friendly order, and
    /// read front to back (scales first) so the hardware prefetcher sees one stream.
    mutating func repack() {
        if !repacked { Self.repack(UnsafeMutableRawPointer(mutating: data), rows: rows, cols: cols, type: type) }
        repacked = true
    }

    /// A view of rows already in repacked order (the stream probe's buffers).
    func assumingRepacked() -> WeightMatrix {
        var m = self
        m.repacked = true
        return m
    }

    static func repack(_ data: UnsafeMutableRawPointer, rows: Int, cols: Int, type: GGMLType) {
        guard type == .q8_0 || type == .q4_0 else { return }
        let (_, blockBytes) = type.block
        let quant = blockBytes - 2, nb = cols / 32, rowBytes = nb * blockBytes
        let tmp = UnsafeMutableRawPointer.allocate(byteCount: rowBytes, alignment: 64)
        defer { tmp.deallocate() }
        for r in 0..<rows {
            let row = data + r * rowBytes
            for b in 0..<nb {
                (tmp + b * 2).copyMemory(from: row + b * blockBytes, byteCount: 2)
                (tmp + nb * 2 + b * quant).copyMemory(from: row + b * blockBytes + 2, byteCount: quant)
            }
            row.copyMemory(from: tmp, byteCount: rowBytes)
        }
    }
}
