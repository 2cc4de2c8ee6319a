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

/// Keys and values per layer and position, f32: `[layer][position][kvDim]`.
final class KVCache {
    let keys: UnsafeMutablePointer<Float>
    let values: UnsafeMutablePointer<Float>
    let layerStride: Int
    let kvDim: Int

    init(config c: LlamaConfig) {
        kvDim = c.kvDim
        layerStride = c.contextLength * c.kvDim
        keys = .allocate(capacity: c.layers * layerStride)
        values = .allocate(capacity: c.layers * layerStride)
        keys.initialize(repeating: 0, count: c.layers * layerStride)
        values.initialize(repeating: 0, count: c.layers * layerStride)
    }

    deinit {
        keys.deallocate()
        values.deallocate()
    }

    @inline(__always) func key(_ layer: Int, _ pos: Int) -> UnsafeMutablePointer<Float> {
        keys + (layer &* layerStride &+ pos &* kvDim)
    }

    @inline(__always) func value(_ layer: Int, _ pos: Int) -> UnsafeMutablePointer<Float> {
        values + (layer &* layerStride &+ pos &* kvDim)
    }
}
