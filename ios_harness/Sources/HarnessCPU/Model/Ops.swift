import Foundation

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
    /// positions 0...pos. `scores` needs pos + 1 floats.
    @inline(__always)
    static func attend(
        q: UnsafePointer<Float>, keys: (Int) -> UnsafePointer<Float>, values: (Int) -> UnsafePointer<Float>,
        pos: Int, headDim: Int, scores: UnsafeMutablePointer<Float>, out: UnsafeMutablePointer<Float>
    ) {
        let scale = 1 / Float(headDim).squareRoot()
        var best = -Float.infinity
        for t in 0...pos {
            let s = dot(q, keys(t), count: headDim) * scale
            scores[t] = s
            best = max(best, s)
        }
        var total: Float = 0
        for t in 0...pos {
            let e = Foundation.exp(scores[t] - best)
            scores[t] = e
            total += e
        }
        let inv = 1 / total
        let o = UnsafeMutableRawPointer(out)
        for i in stride(from: 0, to: headDim, by: 8) {
            o.storeBytes(of: SIMD8<Float>(), toByteOffset: i * 4, as: SIMD8<Float>.self)
        }
        for t in 0...pos {
            let w = SIMD8<Float>(repeating: scores[t] * inv)
            let v = UnsafeRawPointer(values(t))
            for i in stride(from: 0, to: headDim, by: 8) {
                let cur = o.loadUnaligned(fromByteOffset: i &* 4, as: SIMD8<Float>.self)
                o.storeBytes(of: cur + w * v.loadUnaligned(fromByteOffset: i &* 4, as: SIMD8<Float>.self),
                             toByteOffset: i &* 4, as: SIMD8<Float>.self)
            }
        }
    }

    @inline(__always)
    static func silu(_ g: Float) -> Float { g / (1 + Foundation.exp(-g)) }
}
