import Foundation
import Testing
@testable import HarnessMetal

/// The engine's kernels (its real MSL source, compiled and run by MetalCPU) against scalar
/// references. The matrix-vector references follow the kernel's order exactly (lane l takes
/// blocks l, l + 32, ...; lanes combined in MetalCPU's butterfly order), so under the emulation
/// the bits must match: a wrong quant unpacking, stride or row index cannot hide in a
/// tolerance. On a real GPU (Apple's simd_sum order is its own) they agree to rounding.
@Suite struct MetalKernelTests {
    let device = MTLCreateSystemDefaultDevice()!
    let pipelines: MetalPipelines
    let queue: any MTLCommandQueue

    init() throws {
        pipelines = try MetalPipelines.shared(device: device)
        queue = device.makeCommandQueue()!
    }

    func buffer<T>(_ values: [T]) -> any MTLBuffer {
        let b = device.makeBuffer(length: max(4, values.count * MemoryLayout<T>.stride), options: .storageModeShared)!
        values.withUnsafeBytes { b.contents().copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        return b
    }

    func floats(_ b: any MTLBuffer, _ n: Int) -> [Float] {
        Array(UnsafeBufferPointer(start: b.contents().assumingMemoryBound(to: Float.self), count: n))
    }

    /// Encodes with `body`, runs, and fails the test with the command buffer's error if any.
    func run(_ body: (any MTLComputeCommandEncoder) -> Void) {
        let cb = queue.makeCommandBuffer()!
        let enc = cb.makeComputeCommandEncoder(dispatchType: .serial)!
        body(enc)
        enc.endEncoding()
        cb.commit()
        cb.waitUntilCompleted()
        #expect(cb.status == .completed, "\(cb.error.map { "\($0)" } ?? "")")
    }

    /// Bit-identical under MetalCPU (whose reduction order the references copy), within float
    /// rounding on a GPU.
    static func same(_ a: Float, _ b: Float) -> Bool {
        MetalPlatform.emulated ? a.bitPattern == b.bitPattern : abs(a - b) <= 1e-5 * max(1, abs(b))
    }

    /// MetalCPU's simd_sum order over 32 lane values.
    static func butterfly(_ lanes: [Float]) -> Float {
        var v = lanes
        var off = 16
        while off >= 1 {
            for i in 0..<off { v[i] = v[i] + v[i + off] }
            off /= 2
        }
        return v[0]
    }

    struct Rng {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func float() -> Float { Float(next() >> 40) / Float(1 << 24) * 2 - 1 }
    }

    enum Format: String, CaseIterable { case q8_0, q4_0, f32 }

    /// A random matrix in GGUF row layout, and each row's per-lane partial sums against `x`.
    static func matrix(_ format: Format, rows: Int, cols: Int, rng: inout Rng) -> (bytes: [UInt8], dot: (Int, [Float]) -> Float) {
        let nb = cols / 32
        var bytes: [UInt8] = []
        var weights: [[Float]] = []
        for _ in 0..<rows {
            var row: [Float] = []
            switch format {
            case .q8_0, .q4_0:
                var blocks: [(Float, [Float])] = []
                for _ in 0..<nb {
                    let d = Float16(rng.float() * 0.05)
                    bytes += withUnsafeBytes(of: d.bitPattern.littleEndian) { Array($0) }
                    if format == .q8_0 {
                        let q = (0..<32).map { _ in Int8(truncatingIfNeeded: rng.next()) }
                        bytes += q.map { UInt8(bitPattern: $0) }
                        blocks.append((Float(d), q.map { Float($0) }))
                    } else {
                        let packed = (0..<16).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                        bytes += packed
                        // Element j is byte j's low nibble, element j + 16 its high nibble, minus 8.
                        let q = (0..<32).map { j in Float(Int(j < 16 ? packed[j] & 15 : packed[j - 16] >> 4) - 8) }
                        blocks.append((Float(d), q))
                    }
                }
                // Weights as the kernel uses them: scale and integer quants kept apart.
                row = blocks.flatMap { [$0.0] + $0.1 }
            case .f32:
                let w = (0..<cols).map { _ in rng.float() }
                w.withUnsafeBytes { bytes += Array($0) }
                row = w
            }
            weights.append(row)
        }
        let dot: (Int, [Float]) -> Float = { r, x in
            var lanes = [Float](repeating: 0, count: 32)
            for lane in 0..<32 {
                var acc: Float = 0
                switch format {
                case .q8_0, .q4_0:
                    var b = lane
                    while b < nb {
                        let d = weights[r][b * 33]
                        var s: Float = 0
                        if format == .q8_0 {
                            for i in 0..<32 { s += weights[r][b * 33 + 1 + i] * x[b * 32 + i] }
                        } else {
                            for j in 0..<16 {
                                s += weights[r][b * 33 + 1 + j] * x[b * 32 + j]
                                s += weights[r][b * 33 + 1 + j + 16] * x[b * 32 + j + 16]
                            }
                        }
                        acc += d * s
                        b += 32
                    }
                case .f32:
                    var i = lane
                    while i < cols {
                        acc += weights[r][i] * x[i]
                        i += 32
                    }
                }
                lanes[lane] = acc
            }
            return butterfly(lanes)
        }
        return (bytes, dot)
    }

    @Test(arguments: Format.allCases)
    func matvecIsBitExactAgainstItsOrder(_ format: Format) throws {
        var rng = Rng(state: 7)
        // 37 rows: the last threadgroup of 8 rows is partly empty. 40 blocks: lanes 0-7 take two.
        let rows = 37, cols = 40 * 32, columns = 3, inStride = cols + 32, outStride = rows + 5
        let (bytes, dot) = Self.matrix(format, rows: rows, cols: cols, rng: &rng)
        let x = (0..<(columns * inStride)).map { _ in rng.float() }
        let w = buffer(bytes), xb = buffer(x), out = buffer([Float](repeating: -1, count: columns * outStride))
        run { enc in
            var args = RawLoopMetal.MatvecArgs(rows: UInt32(rows), cols: UInt32(cols), columns: UInt32(columns),
                                               inStride: UInt32(inStride), outStride: UInt32(outStride))
            enc.setComputePipelineState(pipelines["matvec_\(format.rawValue)"])
            enc.setBuffer(w, offset: 0, index: 0)
            enc.setBuffer(xb, offset: 0, index: 1)
            enc.setBuffer(out, offset: 0, index: 2)
            enc.setBytes(&args, length: MemoryLayout.stride(ofValue: args), index: 3)
            enc.dispatchThreadgroups(MTLSize(width: (rows + 7) / 8, height: 1, depth: 1),
                                     threadsPerThreadgroup: MTLSize(width: 256, height: 1, depth: 1))
        }
        let got = floats(out, columns * outStride)
        for c in 0..<columns {
            let xc = Array(x[(c * inStride)..<(c * inStride + cols)])
            for r in 0..<rows {
                #expect(Self.same(got[c * outStride + r], dot(r, xc)), "row \(r) column \(c)")
            }
            // Padding between columns is left alone.
            #expect(got[(c * outStride + rows)..<((c + 1) * outStride)].allSatisfy { $0 == -1 })
        }
    }

    @Test func rmsNormIsBitExactAgainstItsOrder() throws {
        var rng = Rng(state: 3)
        let dim = 96, columns = 2
        let x = (0..<(columns * dim)).map { _ in rng.float() * 3 }, w = (0..<dim).map { _ in rng.float() }
        let out = buffer([Float](repeating: 0, count: columns * dim))
        let eps: Float = 1e-5
        run { enc in
            var args = RawLoopMetal.NormArgs(dim: UInt32(dim), eps: eps, inStride: UInt32(dim), outStride: UInt32(dim))
            enc.setComputePipelineState(pipelines["rms_norm"])
            enc.setBuffer(buffer(x), offset: 0, index: 0)
            enc.setBuffer(buffer(w), offset: 0, index: 1)
            enc.setBuffer(out, offset: 0, index: 2)
            enc.setBytes(&args, length: MemoryLayout.stride(ofValue: args), index: 3)
            enc.dispatchThreadgroups(MTLSize(width: columns, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 32, height: 1, depth: 1))
        }
        let got = floats(out, columns * dim)
        for c in 0..<columns {
            let xc = Array(x[(c * dim)..<((c + 1) * dim)])
            let lanes = (0..<32).map { lane in stride(from: lane, to: dim, by: 32).reduce(Float(0)) { $0 + xc[$1] * xc[$1] } }
            let scale = 1 / (Self.butterfly(lanes) / Float(dim) + eps).squareRoot()
            for i in 0..<dim { #expect(Self.same(got[c * dim + i], xc[i] * scale * w[i])) }
        }
    }

    @Test func ropeRotatesAdjacentPairsAtEachColumnsPosition() throws {
        var rng = Rng(state: 5)
        let heads = 2, headDim = 16, stride = heads * headDim + 8, columns = 3, p0 = 7
        let base: Float = 10000
        let x = (0..<(columns * stride)).map { _ in rng.float() }
        let b = buffer(x)
        run { enc in
            var args = RawLoopMetal.RopeArgs(heads: UInt32(heads), headDim: UInt32(headDim), stride: UInt32(stride),
                                             p0: UInt32(p0), base: base)
            enc.setComputePipelineState(pipelines["rope"])
            enc.setBuffer(b, offset: 0, index: 0)
            enc.setBytes(&args, length: MemoryLayout.stride(ofValue: args), index: 1)
            enc.dispatchThreads(MTLSize(width: heads * headDim / 2, height: columns, depth: 1),
                                threadsPerThreadgroup: MTLSize(width: 32, height: 1, depth: 1))
        }
        let got = floats(b, columns * stride)
        for c in 0..<columns {
            for h in 0..<heads {
                for i in 0..<(headDim / 2) {
                    let theta = Double(p0 + c) * pow(Double(base), -2 * Double(i) / Double(headDim))
                    let o = c * stride + h * headDim + 2 * i
                    let (a, bb) = (Double(x[o]), Double(x[o + 1]))
                    #expect(abs(Double(got[o]) - (a * cos(theta) - bb * sin(theta))) < 1e-5)
                    #expect(abs(Double(got[o + 1]) - (a * sin(theta) + bb * cos(theta))) < 1e-5)
                }
            }
            // Floats past the heads (the stride's padding) are not touched.
            #expect(Array(got[(c * stride + heads * headDim)..<((c + 1) * stride)]) == Array(x[(c * stride + heads * headDim)..<((c + 1) * stride)]))
        }
    }

    @Test func attentionIsCausalWithGroupedHeads() throws {
        var rng = Rng(state: 11)
        let heads = 4, kvHeads = 2, headDim = 16, dim = heads * headDim, kvDim = kvHeads * headDim
        let p0 = 40, columns = 3, ctx = 48
        let q = (0..<(columns * dim)).map { _ in rng.float() }
        let k = (0..<(ctx * kvDim)).map { _ in rng.float() }, v = (0..<(ctx * kvDim)).map { _ in rng.float() }
        let out = buffer([Float](repeating: 0, count: columns * dim))
        run { enc in
            var args = RawLoopMetal.AttnArgs(heads: UInt32(heads), kvHeads: UInt32(kvHeads), headDim: UInt32(headDim),
                                             dim: UInt32(dim), kvDim: UInt32(kvDim), p0: UInt32(p0), ctx: UInt32(ctx))
            enc.setComputePipelineState(pipelines["attention"])
            enc.setBuffer(buffer(q), offset: 0, index: 0)
            enc.setBuffer(buffer(k), offset: 0, index: 1)
            enc.setBuffer(buffer(v), offset: 0, index: 2)
            enc.setBuffer(buffer([Float](repeating: 0, count: columns * heads * ctx)), offset: 0, index: 3)
            enc.setBuffer(out, offset: 0, index: 4)
            enc.setBytes(&args, length: MemoryLayout.stride(ofValue: args), index: 5)
            enc.dispatchThreadgroups(MTLSize(width: heads, height: columns, depth: 1), threadsPerThreadgroup: MTLSize(width: 32, height: 1, depth: 1))
        }
        let got = floats(out, columns * dim)
        for c in 0..<columns {
            for h in 0..<heads {
                let kv = h / (heads / kvHeads), pos = p0 + c
                let scores = (0...pos).map { t in
                    (0..<headDim).reduce(0.0) { $0 + Double(q[c * dim + h * headDim + $1]) * Double(k[t * kvDim + kv * headDim + $1]) }
                        / Double(headDim).squareRoot()
                }
                let best = scores.max()!, e = scores.map { Foundation.exp($0 - best) }, total = e.reduce(0, +)
                for i in 0..<headDim {
                    let o = (0...pos).reduce(0.0) { $0 + e[$1] / total * Double(v[$1 * kvDim + kv * headDim + i]) }
                    #expect(abs(Double(got[c * dim + h * headDim + i]) - o) < 1e-5, "column \(c) head \(h) dim \(i)")
                }
            }
        }
    }

    @Test func elementwiseKernels() throws {
        let n = 100
        let a = (0..<n).map { Float($0) * 0.25 - 10 }, b = (0..<n).map { Float($0 % 7) - 3 }
        let x = buffer(a), h = buffer([Float](repeating: 0, count: n)), dst = buffer([Float](repeating: 0, count: n + 8))
        run { enc in
            var count = UInt32(n)
            enc.setComputePipelineState(pipelines["silu_mul"])
            enc.setBuffer(x, offset: 0, index: 0)
            enc.setBuffer(buffer(b), offset: 0, index: 1)
            enc.setBuffer(h, offset: 0, index: 2)
            enc.setBytes(&count, length: 4, index: 3)
            enc.dispatchThreads(MTLSize(width: n, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 64, height: 1, depth: 1))
            enc.setComputePipelineState(pipelines["add_into"])
            enc.setBuffer(x, offset: 0, index: 0)
            enc.setBuffer(buffer(b), offset: 0, index: 1)
            enc.setBytes(&count, length: 4, index: 2)
            enc.dispatchThreads(MTLSize(width: n, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 64, height: 1, depth: 1))
            var args = RawLoopMetal.CopyArgs(count: UInt32(n), srcOffset: 0, dstOffset: 0)
            enc.setComputePipelineState(pipelines["copy_floats"])
            enc.setBuffer(x, offset: 0, index: 0)
            enc.setBuffer(dst, offset: 32, index: 1)
            enc.setBytes(&args, length: MemoryLayout.stride(ofValue: args), index: 2)
            enc.dispatchThreads(MTLSize(width: n, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 64, height: 1, depth: 1))
        }
        let silu = zip(a, b).map { g, u in g / (1 + Foundation.exp(-g)) * u }
        #expect(zip(floats(h, n), silu).allSatisfy { abs($0 - $1) <= 1e-6 * max(1, abs($1)) })
        let sum = zip(a, b).map { $0 + $1 }
        #expect(floats(x, n) == sum)
        #expect(Array(floats(dst, n + 8)[8...]) == sum && floats(dst, 8) == [Float](repeating: 0, count: 8))
    }
}
