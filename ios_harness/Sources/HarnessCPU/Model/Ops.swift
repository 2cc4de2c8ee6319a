import Foundation
import HarnessModel

/// The elementwise and attention operations of a llama block, each with one fixed
/// accumulation order per output so results do not depend on chunk width or thread count.
enum Ops {
    /// out = x / sqrt(mean(x^2) + eps) * w.
    static func rmsNorm(_ x: UnsafePointer<Float>, _ w: UnsafePointer<Float>, _ out: UnsafeMutablePointer<Float>, count n: Int, eps: Float) {
        var acc = SIMD8<Float>()
        let xv = UnsafeRawPointer(x)
        for i in stride(from: 0, to: n, by: 8) {
            let v = xv.loadUnaligned(fromByteOffset: i * 4, as: SIMD8<Float>.self)
            acc += v * v
        }
        let scale = 1 / (acc.sum() / Float(n) + eps).squareRoot()
        for i in 0..<n { out[i] = x[i] * scale * w[i] }
    }

    /// Dot product of two float vectors whose length is a multiple of 8.
    @inline(__always)
    static func dot(_ a: UnsafePointer<Float>, _ b: UnsafePointer<Float>, count n: Int) -> Float {
        var acc = SIMD8<Float>()
        let av = UnsafeRawPointer(a), bv = UnsafeRawPointer(b)
        for i in stride(from: 0, to: n, by: 8) {
            acc += av.loadUnaligned(fromByteOffset: i &* 4, as: SIMD8<Float>.self)
                * bv.loadUnaligned(fromByteOffset: i &* 4, as: SIMD8<Float>.self)
        }
        return acc.sum()
    }

    /// Rotates adjacent pairs (x[2i], x[2i+1]) of each head by the position's angles
    /// (ggml's "normal" rope, the GGUF llama layout).
    static func rope(_ x: UnsafeMutablePointer<Float>, heads: Int, headDim: Int, cos: UnsafePointer<Float>, sin: UnsafePointer<Float>) {
        for h in 0..<heads {
            let p = x + h * headDim
            for i in 0..<(headDim / 2) {
                let a = p[2 * i], b = p[2 * i + 1]
                p[2 * i] = a * cos[i] - b * sin[i]
                p[2 * i + 1] = a * sin[i] + b * cos[i]
            }
        }
    }

    /// One head of causal attention for the query at `pos`: softmax(q.K / sqrt(d)) V over
    /// positions 0...pos, keys and values `stride` floats apart from `keys` / `values`.
    /// `scores` needs pos + 1 floats. Scores go four positions at a time and the weighted sum of
    /// values 32 outputs at a time (independent dependency chains); each score and each output
    /// keeps one fixed order, so results do not depend on `pos` grouping or chunk width.
    /// `stride` is in elements of `E` (the KV cache's row length).
    @inline(__always)
    static func attend<E: KVElement>(
        _: E.Type, q: UnsafePointer<Float>, keys: UnsafeRawPointer, values: UnsafeRawPointer, stride: Int,
        pos: Int, headDim hd: Int, scores: UnsafeMutablePointer<Float>, out: UnsafeMutablePointer<Float>
    ) {
        let rowBytes = stride &* E.bytes
        let scale = 1 / Float(hd).squareRoot()
        let n = pos &+ 1
        var t = 0
        while t &+ 4 <= n {
            let (s0, s1, s2, s3) = dot4(E.self, q, keys + t &* rowBytes, rowBytes, count: hd)
            scores[t] = s0 * scale
            scores[t &+ 1] = s1 * scale
            scores[t &+ 2] = s2 * scale
            scores[t &+ 3] = s3 * scale
            t &+= 4
        }
        while t < n {
            scores[t] = dot(E.self, q, keys + t &* rowBytes, count: hd) * scale
            t &+= 1
        }
        var best = -Float.infinity
        for t in 0..<n { best = max(best, scores[t]) }
        var total: Float = 0
        for t in 0..<n {
            let e = Foundation.exp(scores[t] - best)
            scores[t] = e
            total += e
        }
        let inv = 1 / total
        for t in 0..<n { scores[t] *= inv }
        let o = UnsafeMutableRawPointer(out)
        var i = 0
        while i &+ 32 <= hd {
            var a0 = SIMD8<Float>(), a1 = SIMD8<Float>(), a2 = SIMD8<Float>(), a3 = SIMD8<Float>()
            var v = values + i &* E.bytes
            let e8 = 8 &* E.bytes
            for t in 0..<n {
                let w = SIMD8<Float>(repeating: scores[t])
                a0 += w * E.load8(v)
                a1 += w * E.load8(v + e8)
                a2 += w * E.load8(v + 2 &* e8)
                a3 += w * E.load8(v + 3 &* e8)
                v += rowBytes
            }
            o.storeBytes(of: a0, toByteOffset: i &* 4, as: SIMD8<Float>.self)
            o.storeBytes(of: a1, toByteOffset: (i &+ 8) &* 4, as: SIMD8<Float>.self)
            o.storeBytes(of: a2, toByteOffset: (i &+ 16) &* 4, as: SIMD8<Float>.self)
            o.storeBytes(of: a3, toByteOffset: (i &+ 24) &* 4, as: SIMD8<Float>.self)
            i &+= 32
        }
        while i < hd {
            var a0 = SIMD8<Float>()
            var v = values + i &* E.bytes
            for t in 0..<n {
                a0 += SIMD8<Float>(repeating: scores[t]) * E.load8(v)
                v += rowBytes
            }
            o.storeBytes(of: a0, toByteOffset: i &* 4, as: SIMD8<Float>.self)
            i &+= 8
        }
    }

    /// A query against one cached key of `n` elements, in a fixed order.
    @inline(__always)
    static func dot<E: KVElement>(_: E.Type, _ q: UnsafePointer<Float>, _ k: UnsafeRawPointer, count n: Int) -> Float {
        var acc = SIMD8<Float>()
        let qv = UnsafeRawPointer(q)
        for i in Swift.stride(from: 0, to: n, by: 8) {
            acc += qv.loadUnaligned(fromByteOffset: i &* 4, as: SIMD8<Float>.self) * E.load8(k + i &* E.bytes)
        }
        return acc.sum()
    }

    /// `dot` of `q` with four keys `rowBytes` apart, each in `dot`'s exact order.
    @inline(__always)
    static func dot4<E: KVElement>(_: E.Type, _ q: UnsafePointer<Float>, _ k: UnsafeRawPointer, _ rowBytes: Int, count n: Int)
        -> (Float, Float, Float, Float) {
        var a0 = SIMD8<Float>(), a1 = SIMD8<Float>(), a2 = SIMD8<Float>(), a3 = SIMD8<Float>()
        let qv = UnsafeRawPointer(q)
        let k1 = k + rowBytes, k2 = k1 + rowBytes, k3 = k2 + rowBytes
        for i in Swift.stride(from: 0, to: n, by: 8) {
            let x = qv.loadUnaligned(fromByteOffset: i &* 4, as: SIMD8<Float>.self)
            let o = i &* E.bytes
            a0 += x * E.load8(k + o)
            a1 += x * E.load8(k1 + o)
            a2 += x * E.load8(k2 + o)
            a3 += x * E.load8(k3 + o)
        }
        return (a0.sum(), a1.sum(), a2.sum(), a3.sum())
    }

    @inline(__always)
    static func silu(_ g: Float) -> Float { g / (1 + Foundation.exp(-g)) }
}
