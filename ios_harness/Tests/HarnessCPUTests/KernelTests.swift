import Foundation
import Testing
@testable import HarnessCPU
@testable import HarnessModel

/// The SIMD kernels against a scalar dequantize-then-dot, and the four-column kernels against
/// the one-column kernel bit for bit.
@Suite struct KernelTests {
    struct Rng {
        var s: UInt64
        mutating func next() -> UInt64 {
            s = s &* 6364136223846793005 &+ 1442695040888963407
            return s >> 11
        }
        mutating func float() -> Float { Float(next() % 20001) / 10000 - 1 }
    }

    /// Random Q8_0 / Q4_0 rows with f16 scales.
    func makeRows(_ type: GGMLType, rows: Int, cols: Int, rng: inout Rng) -> [UInt8] {
        let bb = type.block.bytes
        var out = [UInt8](repeating: 0, count: rows * cols / 32 * bb)
        for b in 0..<(rows * cols / 32) {
            let scale = Float16(Float(rng.next() % 1000 + 1) / 50000)
            out[b * bb] = UInt8(scale.bitPattern & 0xFF)
            out[b * bb + 1] = UInt8(scale.bitPattern >> 8)
            for i in 2..<bb { out[b * bb + i] = type == .q8_0 ? UInt8(truncatingIfNeeded: Int(rng.next() % 255) - 127) : UInt8(rng.next() & 0xFF) }
        }
        return out
    }

    /// 256 columns: whole Q4_0 block pairs; 96: an odd last block.
    @Test(arguments: [GGMLType.q8_0, .q4_0], [256, 96])
    func kernelsMatchScalarReference(_ type: GGMLType, _ cols: Int) throws {
        for kernels in Set([KernelFamily.swift, .best]) { try check(type, cols, kernels) }
    }

    func check(_ type: GGMLType, _ cols: Int, _ kernels: KernelFamily) throws {
        var rng = Rng(s: 42)
        let rows = 7, columns = 6
        let bytes = makeRows(type, rows: rows, cols: cols, rng: &rng)
        var packed = bytes
        let x = (0..<(cols * columns)).map { _ in rng.float() }
        // The reference dequantizes the GGUF order; the kernels run on the repacked copy.
        try bytes.withUnsafeBytes { gguf in
            try packed.withUnsafeMutableBytes { pb in
                WeightMatrix.repack(pb.baseAddress!, rows: rows, cols: cols, type: type)
                let original = WeightMatrix(probe: gguf.baseAddress!, rows: rows, cols: cols, type: type)
                let m = WeightMatrix(probe: UnsafeRawPointer(pb.baseAddress!), rows: rows, cols: cols, type: type).assumingRepacked()
                let input = PreparedInput(length: cols, maxColumns: columns)
                var out = [Float](repeating: 0, count: rows * columns)
                x.withUnsafeBufferPointer { input.prepare($0.baseAddress!, count: columns, q8: true, q4: true, plain: true) }
                out.withUnsafeMutableBufferPointer {
                    m.multiply(rows: 0..<rows, input: input, out: $0.baseAddress!, outStride: rows, kernels: kernels)
                }
                var single = [Float](repeating: 0, count: rows)
                var deq = [Float](repeating: 0, count: cols)
                var deqPacked = [Float](repeating: 0, count: cols)
                for c in 0..<columns {
                    let one = PreparedInput(length: cols, maxColumns: 1)
                    x.withUnsafeBufferPointer { one.prepare($0.baseAddress! + c * cols, count: 1, q8: true, q4: true, plain: true) }
                    single.withUnsafeMutableBufferPointer {
                        m.multiply(rows: 0..<rows, input: one, out: $0.baseAddress!, outStride: rows, kernels: kernels)
                    }
                    for r in 0..<rows {
                        // Chunked columns give the one-column bits.
                        #expect(out[c * rows + r].bitPattern == single[r].bitPattern)
                        deq.withUnsafeMutableBufferPointer { original.dequantizeRow(r, into: $0.baseAddress!) }
                        deqPacked.withUnsafeMutableBufferPointer { m.dequantizeRow(r, into: $0.baseAddress!) }
                        #expect(deq == deqPacked)
                        var ref: Double = 0
                        var scale: Double = 0
                        for i in 0..<cols {
                            ref += Double(deq[i]) * Double(x[c * cols + i])
                            scale += abs(Double(deq[i]) * Double(x[c * cols + i]))
                        }
                        // Activation quantization to int8 bounds the error by ~1% of sum |w x|.
                        try #require(abs(Double(out[c * rows + r]) - ref) <= 0.01 * scale + 1e-6)
                    }
                }
            }
        }
    }
}
