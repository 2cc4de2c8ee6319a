import HarnessModel

/// Row-dot kernels. Every kernel keeps one fixed accumulation order per output scalar:
/// blocks in K order into one 8-lane float accumulator, lanes summed by `SIMD8.sum()` at the
/// end. The multi-column variants run exactly the per-column operations of the one-column
/// variant, only sharing the weight loads, so chunked prefill is bit-identical to sequential.
enum Kernels {
    /// Sums adjacent int16 lane pairs into int32 and converts to float exactly
    /// (|value| < 2^22 always holds here: at most 4 * 127 * 127 per lane).
    @inline(__always)
    static func pairsToFloat(_ s: SIMD16<Int16>) -> SIMD8<Float> {
        let t = unsafeBitCast(s, to: SIMD8<Int32>.self)
        let w = ((t &<< 16) &>> 16) &+ (t &>> 16)
        let magic = SIMD8<Int32>(repeating: 0x4B40_0000)
        return unsafeBitCast(w &+ magic, to: SIMD8<Float>.self) - SIMD8<Float>(repeating: 12_582_912)
    }

    /// An f16 block scale as f32, exactly (normals, subnormals, zero; not inf/NaN), in integer
    /// registers: LLVM lowers `Float(Float16(bitPattern:))` of a loaded value to `vpinsrw` into
    /// a don't-care register, which it may pick as the accumulator, chaining every block to the
    /// previous one (measured: 3x slower kernels).
    @inline(__always)
    static func half(_ p: UnsafeRawPointer) -> Float { GGMLType.half(p) }

    /// Converts a repacked row's `blocks` f16 scales (at `scales`) into `ws`, eight at a time;
    /// `ws[blocks]` is set to 0 (the empty half of an odd Q4_0 pair).
    @inline(__always)
    static func rowScales(_ scales: UnsafeRawPointer, blocks: Int, into ws: UnsafeMutablePointer<Float>) {
        var b = 0
        let out = UnsafeMutableRawPointer(ws)
        while b &+ 8 <= blocks {
            out.storeBytes(of: SIMD8<Float>(scales.loadUnaligned(fromByteOffset: b &* 2, as: SIMD8<Float16>.self)),
                           toByteOffset: b &* 4, as: SIMD8<Float>.self)
            b &+= 8
        }
        while b < blocks {
            ws[b] = half(scales + b &* 2)
            b &+= 1
        }
        ws[blocks] = 0
    }
}

/// Q8_0 rows, repacked at load (`WeightMatrix.repack`): the row's f16 scales, then its 32-byte
/// int8 quant blocks back to back (`row` below points at the quants). Same bytes as the GGUF row, in an order that loads whole
/// vectors: the scales of a row convert eight at a time (`Kernels.rowScales`).
enum Q8_0Kernel {
    /// Splits a block's int8 weights into even and odd elements, sign-extended to int16.
    @inline(__always)
    static func unpack(_ quants: UnsafeRawPointer) -> (SIMD16<Int16>, SIMD16<Int16>) {
        let a = unsafeBitCast(quants.loadUnaligned(as: SIMD32<Int8>.self), to: SIMD16<Int16>.self)
        return ((a &<< 8) &>> 8, a &>> 8)
    }

    /// One row against one column; `ws` holds the row's block scales as floats.
    @inline(__always)
    static func dot1(_ row: UnsafeRawPointer, ws: UnsafePointer<Float>, blocks: Int,
                     x: UnsafePointer<SIMD16<Int16>>, xd: UnsafePointer<Float>) -> Float {
        var acc = SIMD8<Float>()
        for b in 0..<blocks {
            let (e, o) = unpack(row + b &* 32)
            let s = e &* x[2 &* b] &+ o &* x[2 &* b &+ 1]
            acc += Kernels.pairsToFloat(s) * (ws[b] * xd[b])
        }
        return acc.sum()
    }

    /// One row against four columns `colStride` vectors / `scaleStride` scales apart.
    @inline(__always)
    static func dot4(
        _ row: UnsafeRawPointer, ws: UnsafePointer<Float>, blocks: Int, x: UnsafePointer<SIMD16<Int16>>,
        colStride: Int, xd: UnsafePointer<Float>, scaleStride: Int
    ) -> (Float, Float, Float, Float) {
        var a0 = SIMD8<Float>(), a1 = SIMD8<Float>(), a2 = SIMD8<Float>(), a3 = SIMD8<Float>()
        let x1 = x + colStride, x2 = x1 + colStride, x3 = x2 + colStride
        let d1 = xd + scaleStride, d2 = d1 + scaleStride, d3 = d2 + scaleStride
        for b in 0..<blocks {
            let (e, o) = unpack(row + b &* 32)
            let w = ws[b], i = 2 &* b, j = i &+ 1
            a0 += Kernels.pairsToFloat(e &* x[i] &+ o &* x[j]) * (w * xd[b])
            a1 += Kernels.pairsToFloat(e &* x1[i] &+ o &* x1[j]) * (w * d1[b])
            a2 += Kernels.pairsToFloat(e &* x2[i] &+ o &* x2[j]) * (w * d2[b])
            a3 += Kernels.pairsToFloat(e &* x3[i] &+ o &* x3[j]) * (w * d3[b])
        }
        return (a0.sum(), a1.sum(), a2.sum(), a3.sum())
    }
}

/// Q4_0 rows, repacked at load: the row's f16 scales, then its 16-byte quant blocks back to back
/// (element j in the low nibble of byte j, element j + 16 in the high nibble, value = nibble - 8).
///
/// Blocks go in pairs: the two blocks' 32 quant bytes are one 16-lane vector of uint16, whose
/// four nibble planes line up with the four input vectors of `PreparedInput.q4`; the -8 offset
/// rides in a fifth, precomputed input vector. An odd last block runs as a pair with an empty
/// second half (zero inputs, zero scale), so its arithmetic is the same code.
enum Q4_0Kernel {
    /// Products of a block pair's nibbles with one column's five prepared vectors, as floats
    /// (lanes 0-3 the first block, 4-7 the second).
    @inline(__always)
    static func pairLanes(
        _ n0: SIMD16<Int16>, _ n1: SIMD16<Int16>, _ n2: SIMD16<Int16>, _ n3: SIMD16<Int16>,
        _ x: UnsafePointer<SIMD16<Int16>>
    ) -> SIMD8<Float> {
        Kernels.pairsToFloat(n0 &* x[0] &+ n1 &* x[1] &+ n2 &* x[2] &+ n3 &* x[3] &+ x[4])
    }

    @inline(__always)
    static func nibbles(_ l: SIMD16<UInt16>) -> (SIMD16<Int16>, SIMD16<Int16>, SIMD16<Int16>, SIMD16<Int16>) {
        let m = SIMD16<UInt16>(repeating: 0x000F)
        return (unsafeBitCast(l & m, to: SIMD16<Int16>.self),
                unsafeBitCast((l &>> 4) & m, to: SIMD16<Int16>.self),
                unsafeBitCast((l &>> 8) & m, to: SIMD16<Int16>.self),
                unsafeBitCast(l &>> 12, to: SIMD16<Int16>.self))
    }

    /// The quant bytes of blocks `b` and `b + 1` (zeros past the last block).
    @inline(__always)
    static func pair(_ row: UnsafeRawPointer, _ b: Int, blocks: Int) -> SIMD16<UInt16> {
        if b &+ 1 < blocks { return row.loadUnaligned(fromByteOffset: b &* 16, as: SIMD16<UInt16>.self) }
        return SIMD16(lowHalf: row.loadUnaligned(fromByteOffset: b &* 16, as: SIMD8<UInt16>.self), highHalf: SIMD8())
    }

    @inline(__always)
    static func scales(_ da: Float, _ db: Float) -> SIMD8<Float> {
        SIMD8(lowHalf: SIMD4(repeating: da), highHalf: SIMD4(repeating: db))
    }

    /// `x` holds 5 vectors per block pair; `xd` and `ws` one scale per block, zero-padded to even.
    @inline(__always)
    static func dot1(_ row: UnsafeRawPointer, ws: UnsafePointer<Float>, blocks: Int,
                     x: UnsafePointer<SIMD16<Int16>>, xd: UnsafePointer<Float>) -> Float {
        var acc = SIMD8<Float>()
        var b = 0
        while b < blocks {
            let (n0, n1, n2, n3) = nibbles(pair(row, b, blocks: blocks))
            acc += pairLanes(n0, n1, n2, n3, x + (b &>> 1) &* 5) * scales(ws[b] * xd[b], ws[b &+ 1] * xd[b &+ 1])
            b &+= 2
        }
        return acc.sum()
    }

    @inline(__always)
    static func dot4(
        _ row: UnsafeRawPointer, ws: UnsafePointer<Float>, blocks: Int, x: UnsafePointer<SIMD16<Int16>>,
        colStride: Int, xd: UnsafePointer<Float>, scaleStride: Int
    ) -> (Float, Float, Float, Float) {
        var a0 = SIMD8<Float>(), a1 = SIMD8<Float>(), a2 = SIMD8<Float>(), a3 = SIMD8<Float>()
        let x1 = x + colStride, x2 = x1 + colStride, x3 = x2 + colStride
        let d1 = xd + scaleStride, d2 = d1 + scaleStride, d3 = d2 + scaleStride
        var b = 0
        while b < blocks {
            let (n0, n1, n2, n3) = nibbles(pair(row, b, blocks: blocks))
            let v = (b &>> 1) &* 5, c = b &+ 1
            let wa = ws[b], wb = ws[c]
            a0 += pairLanes(n0, n1, n2, n3, x + v) * scales(wa * xd[b], wb * xd[c])
            a1 += pairLanes(n0, n1, n2, n3, x1 + v) * scales(wa * d1[b], wb * d1[c])
            a2 += pairLanes(n0, n1, n2, n3, x2 + v) * scales(wa * d2[b], wb * d2[c])
            a3 += pairLanes(n0, n1, n2, n3, x3 + v) * scales(wa * d3[b], wb * d3[c])
            b &+= 2
        }
        return (a0.sum(), a1.sum(), a2.sum(), a3.sum())
    }
}

/// F32 rows against float columns (reference format; not a speed target).
enum F32Kernel {
    @inline(__always)
    static func dot1(_ row: UnsafeRawPointer, count: Int, x: UnsafePointer<Float>) -> Float {
        var acc = SIMD8<Float>()
        let xv = UnsafeRawPointer(x)
        for i in stride(from: 0, to: count, by: 8) {
            acc += row.loadUnaligned(fromByteOffset: i &* 4, as: SIMD8<Float>.self)
                * xv.loadUnaligned(fromByteOffset: i &* 4, as: SIMD8<Float>.self)
        }
        return acc.sum()
    }
}
