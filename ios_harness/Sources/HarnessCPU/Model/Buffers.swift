import HarnessModel

/// Activation buffers for chunks of up to `columns` tokens, and the KV cache.
final class Buffers {
    let columns: Int
    let x, xn, q, k, v, att, gate, up, hidden, tmp: UnsafeMutablePointer<Float>
    let prepDim: PreparedInput
    let prepHidden: PreparedInput

    init(config c: LlamaConfig, columns: Int) {
        self.columns = columns
        func alloc(_ n: Int) -> UnsafeMutablePointer<Float> {
            let p = UnsafeMutablePointer<Float>.allocate(capacity: n * columns)
            p.initialize(repeating: 0, count: n * columns)
            return p
        }
        x = alloc(c.dim)
        xn = alloc(c.dim)
        q = alloc(c.dim)
        k = alloc(c.kvDim)
        v = alloc(c.kvDim)
        att = alloc(c.dim)
        gate = alloc(c.hidden)
        up = alloc(c.hidden)
        hidden = alloc(c.hidden)
        tmp = alloc(c.dim)
        prepDim = PreparedInput(length: c.dim, maxColumns: columns)
        prepHidden = PreparedInput(length: c.hidden, maxColumns: columns)
    }

    deinit {
        for p in [x, xn, q, k, v, att, gate, up, hidden, tmp] { p.deallocate() }
    }
}

/// How the KV cache stores keys and values; attention reads eight at a time as floats.
protocol KVElement {
    static var bytes: Int { get }
    /// Eight values at `p` as floats.
    static func load8(_ p: UnsafeRawPointer) -> SIMD8<Float>
    /// Stores `count` floats (a multiple of 8) at `p`.
    static func store(_ x: UnsafePointer<Float>, count: Int, to p: UnsafeMutableRawPointer)
}

enum KVFloat32: KVElement {
    static var bytes: Int { 4 }
    @inline(__always) static func load8(_ p: UnsafeRawPointer) -> SIMD8<Float> { p.loadUnaligned(as: SIMD8<Float>.self) }
    @inline(__always) static func store(_ x: UnsafePointer<Float>, count: Int, to p: UnsafeMutableRawPointer) {
        p.copyMemory(from: x, byteCount: count * 4)
    }
}

/// Half the KV traffic of f32 (llama.cpp's default); conversions are exact one way
/// (f16 -> f32) and round-to-nearest the other, the same for every chunk width.
enum KVFloat16: KVElement {
    static var bytes: Int { 2 }
    @inline(__always) static func load8(_ p: UnsafeRawPointer) -> SIMD8<Float> {
        // Lane by lane on purpose: LLVM folds this into one vcvtph2ps, while the stdlib's
        // SIMD8<Float>(SIMD8<Float16>) stays an out-of-line call inside attention.
        let h = p.loadUnaligned(as: SIMD8<Float16>.self)
        return SIMD8<Float>(Float(h[0]), Float(h[1]), Float(h[2]), Float(h[3]),
                            Float(h[4]), Float(h[5]), Float(h[6]), Float(h[7]))
    }
    @inline(__always) static func store(_ x: UnsafePointer<Float>, count: Int, to p: UnsafeMutableRawPointer) {
        let src = UnsafeRawPointer(x)
        for i in stride(from: 0, to: count, by: 8) {
            p.storeBytes(of: SIMD8<Float16>(src.loadUnaligned(fromByteOffset: i * 4, as: SIMD8<Float>.self)),
                         toByteOffset: i * 2, as: SIMD8<Float16>.self)
        }
    }
}

/// Keys and values per layer, KV head and position: `[layer][kvHead][position][headDim]`, so the
/// positions attention walks for one head are one contiguous stream.
final class KVCache {
    let half: Bool
    let keys: UnsafeMutableRawPointer
    let values: UnsafeMutableRawPointer
    let heads: Int
    let headDim: Int
    let context: Int
    /// Bytes per position of one head, per head, per layer.
    let rowBytes: Int
    let headStride: Int
    let layerStride: Int

    init(config c: LlamaConfig, half: Bool) {
        self.half = half
        heads = c.kvHeads
        headDim = c.headDim
        context = c.contextLength
        rowBytes = c.headDim * (half ? 2 : 4)
        headStride = c.contextLength * rowBytes
        layerStride = c.kvHeads * headStride
        keys = .allocate(byteCount: c.layers * layerStride, alignment: 64)
        values = .allocate(byteCount: c.layers * layerStride, alignment: 64)
        keys.initializeMemory(as: UInt8.self, repeating: 0, count: c.layers * layerStride)
        values.initializeMemory(as: UInt8.self, repeating: 0, count: c.layers * layerStride)
    }

    deinit {
        keys.deallocate()
        values.deallocate()
    }

    @inline(__always) func key(_ layer: Int, _ head: Int, _ pos: Int) -> UnsafeMutableRawPointer {
        keys + (layer &* layerStride &+ head &* headStride &+ pos &* rowBytes)
    }

    @inline(__always) func value(_ layer: Int, _ head: Int, _ pos: Int) -> UnsafeMutableRawPointer {
        values + (layer &* layerStride &+ head &* headStride &+ pos &* rowBytes)
    }

    /// Stores one position's keys and values (all KV heads, `heads * headDim` floats each).
    func store(layer: Int, pos: Int, keys k: UnsafePointer<Float>, values v: UnsafePointer<Float>) {
        for h in 0..<heads {
            if half {
                KVFloat16.store(k + h * headDim, count: headDim, to: key(layer, h, pos))
                KVFloat16.store(v + h * headDim, count: headDim, to: value(layer, h, pos))
            } else {
                KVFloat32.store(k + h * headDim, count: headDim, to: key(layer, h, pos))
                KVFloat32.store(v + h * headDim, count: headDim, to: value(layer, h, pos))
            }
        }
    }
}
