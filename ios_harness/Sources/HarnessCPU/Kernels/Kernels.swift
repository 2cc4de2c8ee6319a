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

    @inline(__always)
    static func half(_ p: UnsafeRawPointer) -> Float {
        Float(Float16(bitPattern: p.loadUnaligned(as: UInt16.self)))
    }
}

/// Q8_0: 34-byte blocks (f16 scale, 32 x int8).
enum Q8_0Kernel {
    /// Splits a block's int8 weights into even and odd elements, sign-extended to int16.
    @inline(__always)
    static func unpack(_ block: UnsafeRawPointer) -> (SIMD16<Int16>, SIMD16<Int16>) {
        let a = unsafeBitCast(block.loadUnaligned(fromByteOffset: 2, as: SIMD32<Int8>.self), to: SIMD16<Int16>.self)
        return ((a &<< 8) &>> 8, a &>> 8)
    }

    /// One row against one column.
    @inline(__always)
    static func dot1(_ row: UnsafeRawPointer, blocks: Int, x: UnsafePointer<SIMD16<Int16>>, xd: UnsafePointer<Float>) -> Float {
        var acc = SIMD8<Float>()
        var p = row
        for b in 0..<blocks {
            let dw = Kernels.half(p)
            let (e, o) = unpack(p)
            let s = e &* x[2 &* b] &+ o &* x[2 &* b &+ 1]
            acc += Kernels.pairsToFloat(s) * (dw * xd[b])
            p += 34
        }
        return acc.sum()
    }

    /// One row against four columns `colStride` vectors / `scaleStride` scales apart.
    @inline(__always)
    static func dot4(
        _ row: UnsafeRawPointer, blocks: Int, x: UnsafePointer<SIMD16<Int16>>, colStride: Int,
        xd: UnsafePointer<Float>, scaleStride: Int
    ) -> (Float, Float, Float, Float) {
        var a0 = SIMD8<Float>(), a1 = SIMD8<Float>(), a2 = SIMD8<Float>(), a3 = SIMD8<Float>()
        let x1 = x + colStride, x2 = x1 + colStride, x3 = x2 + colStride
        let d1 = xd + scaleStride, d2 = d1 + scaleStride, d3 = d2 + scaleStride
        var p = row
        for b in 0..<blocks {
            let dw = Kernels.half(p)
            let (e, o) = unpack(p)
            let i = 2 &* b, j = i &+ 1
            a0 += Kernels.pairsToFloat(e &* x[i] &+ o &* x[j]) * (dw * xd[b])
            a1 += Kernels.pairsToFloat(e &* x1[i] &+ o &* x1[j]) * (dw * d1[b])
            a2 += Kernels.pairsToFloat(e &* x2[i] &+ o &* x2[j]) * (dw * d2[b])
            a3 += Kernels.pairsToFloat(e &* x3[i] &+ o &* x3[j]) * (dw * d3[b])
            p += 34
        }
        return (a0.sum(), a1.sum(), a2.sum(), a3.sum())
    }
}

/// Q4_0: 18-byte blocks (f16 scale, 16 bytes: element j in the low nibble of byte j,
/// element j + 16 in the high nibble), value = nibble - 8.
enum Q4_0Kernel {
    /// Unpacks a block into two int16 vectors in `PreparedInput.q4` lane order:
    /// first = [e0, e2, ..., e14, e16, e18, ..., e30], second = the odd elements likewise.
    @inline(__always)
    static func unpack(_ block: UnsafeRawPointer) -> (SIMD16<Int16>, SIMD16<Int16>) {
        let l = block.loadUnaligned(fromByteOffset: 2, as: SIMD8<UInt16>.self)
        let d = SIMD16<UInt16>(lowHalf: l, highHalf: l &>> 4)
        let nib = SIMD16<UInt16>(repeating: 0x000F)
        let eight = SIMD16<Int16>(repeating: 8)
        let first = unsafeBitCast(d & nib, to: SIMD16<Int16>.self) &- eight
        let second = unsafeBitCast((d &>> 8) & nib, to: SIMD16<Int16>.self) &- eight
        return (first, second)
    }

    @inline(__always)
    static func dot1(_ row: UnsafeRawPointer, blocks: Int, x: UnsafePointer<SIMD16<Int16>>, xd: UnsafePointer<Float>) -> Float {
        var acc = SIMD8<Float>()
        var p = row
        for b in 0..<blocks {
            let dw = Kernels.half(p)
            let (f, s) = unpack(p)
            acc += Kernels.pairsToFloat(f &* x[2 &* b] &+ s &* x[2 &* b &+ 1]) * (dw * xd[b])
            p += 18
        }
        return acc.sum()
    }

    @inline(__always)
    static func dot4(
        _ row: UnsafeRawPointer, blocks: Int, x: UnsafePointer<SIMD16<Int16>>, colStride: Int,
        xd: UnsafePointer<Float>, scaleStride: Int
    ) -> (Float, Float, Float, Float) {
        var a0 = SIMD8<Float>(), a1 = SIMD8<Float>(), a2 = SIMD8<Float>(), a3 = SIMD8<Float>()
        let x1 = x + colStride, x2 = x1 + colStride, x3 = x2 + colStride
        let d1 = xd + scaleStride, d2 = d1 + scaleStride, d3 = d2 + scaleStride
        var p = row
        for b in 0..<blocks {
            let dw = Kernels.half(p)
            let (f, s) = unpack(p)
            let i = 2 &* b, j = i &+ 1
            a0 += Kernels.pairsToFloat(f &* x[i] &+ s &* x[j]) * (dw * xd[b])
            a1 += Kernels.pairsToFloat(f &* x1[i] &+ s &* x1[j]) * (dw * d1[b])
            a2 += Kernels.pairsToFloat(f &* x2[i] &+ s &* x2[j]) * (dw * d2[b])
            a3 += Kernels.pairsToFloat(f &* x3[i] &+ s &* x3[j]) * (dw * d3[b])
            p += 18
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
