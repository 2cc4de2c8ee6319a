import Foundation
import HarnessCore
import HarnessModel

/// The CPU raw loop: a llama decoder over GGUF Q8_0 / Q4_0 (F32 also read) weights, greedy.
///
/// Matrix-vector work is split over output rows across the worker pool; every output scalar is
/// computed by one thread with one kernel in one K order, so results do not depend on the
/// thread count. Prefill runs chunks of M tokens through the same kernels column by column
/// (sharing weight loads), so any chunk width gives the bits of M = 1.
public final class RawLoopCPU: Engine {
    public static let engineName = "rawloop-cpu"
    /// Bumped whenever kernel arithmetic changes (results are only comparable within a version).
    public static let engineVersion = "rawloop-cpu 1"
    /// Tuning parameters this engine accepts.
    public static let tuningKeys: Set<String> = ["threads", "kv_cache", "kernels"]

    public let name = RawLoopCPU.engineName
    public var version: String { "\(RawLoopCPU.engineVersion) (kv \(kvType.rawValue), kernels \(kernels.rawValue))" }
    public let config: LlamaConfig
    public let file: GGUFFile
    let weights: LlamaWeights
    let pool: WorkerPool
    let kv: KVCache
    var buffers: Buffers
    let ropeCos: UnsafeMutablePointer<Float>
    let ropeSin: UnsafeMutablePointer<Float>
    let scores: UnsafeMutablePointer<Float>
    /// Logits of the last position run (prefill's last token or the last decode step).
    public let logits: UnsafeMutablePointer<Float>
    public private(set) var position = 0
    /// Which prepared-input layouts the matrices' kernels read.
    private let prepQ8: Bool
    private let prepQ4: Bool
    private let prepPlain: Bool
    /// The row-dot kernels of the quantized matrices.
    public let kernels: KernelFamily

    public var contextLength: Int { config.contextLength }
    public var vocabSize: Int { config.vocab }
    public var threads: Int? { pool.count }
    public var bytesPerDecodeToken: Int { weights.bytesPerDecodeToken }
    public func bytesPerPrefillToken(chunkWidth: Int) -> Int { weights.bytesPerPrefillToken(chunkWidth: max(1, chunkWidth)) }
    public var weightTypes: [String] { weights.weightTypes.map(\.description).sorted() }
    public var tiedHead: Bool { weights.tied }

    /// KV cache element type: f32 (the default) or f16 (half the attention traffic; measured no
    /// faster on x86-64 yet: the f16 -> f32 vector conversion is not inlined into attention).
    public enum KVType: String, Sendable {
        case f16, f32
    }

    public let kvType: KVType

    /// `maxPositions` bounds the KV cache (and rope tables) below the model's context when a run
    /// needs fewer positions; a file claiming an absurd context then cannot exhaust memory.
    public init(modelPath: String, threads: Int, kvCache: KVType = .f16, kernels: KernelFamily = .best,
                maxPositions: Int? = nil, dropPageCache: Bool = false) throws {
        kvType = kvCache
        self.kernels = kernels
        file = try GGUFFile(path: modelPath, dropPageCache: dropPageCache)
        var c = try LlamaConfig(file: file)
        c.contextLength = min(c.contextLength, max(1, maxPositions ?? c.contextLength))
        let kvBytes = 2.0 * Double(c.layers) * Double(c.contextLength) * Double(c.kvDim) * (kvCache == .f16 ? 2 : 4)
        if kvBytes > Double(ProcessInfo.processInfo.physicalMemory) / 2 {
            throw HarnessError(.outOfMemory, "a KV cache for \(c.contextLength) positions needs \(Int(kvBytes / 1e6)) MB")
        }
        config = c
        guard config.headDim % 8 == 0 else {
            throw HarnessError(.badModel, "head dim \(config.headDim) is not a multiple of 8")
        }
        var w = try LlamaWeights(file: file, config: config)
        w.repack()
        weights = w
        let types = weights.weightTypes
        let quantized = types.contains(.q8_0) || types.contains(.q4_0)
        prepPlain = kernels == .avx2 && quantized
        prepQ8 = kernels == .swift && types.contains(.q8_0)
        prepQ4 = kernels == .swift && types.contains(.q4_0)
        pool = WorkerPool(threads: threads)
        kv = KVCache(config: config, half: kvCache == .f16)
        buffers = Buffers(config: config, columns: 1)
        let half = config.headDim / 2
        ropeCos = .allocate(capacity: config.contextLength * half)
        ropeSin = .allocate(capacity: config.contextLength * half)
        for p in 0..<config.contextLength {
            for i in 0..<half {
                let theta = Double(p) * pow(Double(config.ropeBase), -2 * Double(i) / Double(config.headDim))
                ropeCos[p * half + i] = Float(Foundation.cos(theta))
                ropeSin[p * half + i] = Float(Foundation.sin(theta))
            }
        }
        scores = .allocate(capacity: pool.parts * config.contextLength)
        logits = .allocate(capacity: config.vocab)
        logits.initialize(repeating: 0, count: config.vocab)
    }

    deinit {
        pool.stop()
        ropeCos.deallocate()
        ropeSin.deallocate()
        scores.deallocate()
        logits.deallocate()
    }

    public func reset() { position = 0 }

    public func prefill(_ tokens: [Int32], chunkWidth: Int) throws -> Int32 {
        guard !tokens.isEmpty else { throw HarnessError(.badSpec, "empty prompt") }
        guard chunkWidth >= 1 else { throw HarnessError(.badSpec, "chunk width \(chunkWidth) < 1") }
        try checkRoom(tokens.count)
        let m = min(chunkWidth, tokens.count)
        if buffers.columns < m { buffers = Buffers(config: config, columns: m) }
        var start = 0
        while start < tokens.count {
            let n = min(m, tokens.count - start)
            try forward(Array(tokens[start..<(start + n)]))
            start += n
        }
        return head()
    }

    public func decode(_ token: Int32) throws -> Int32 {
        try checkRoom(1)
        try forward([token])
        return head()
    }

    private func checkRoom(_ n: Int) throws {
        if position + n > config.contextLength {
            throw HarnessError(.contextOverflow, "position \(position + n) exceeds the context of \(config.contextLength)")
        }
    }

    /// Runs `tokens` (at most `buffers.columns`) through every layer at the next positions.
    private func forward(_ tokens: [Int32]) throws {
        let c = config, b = buffers, m = tokens.count, p0 = position, ks = kernels
        let dim = c.dim, kvDim = c.kvDim, hd = c.headDim, hidden = c.hidden
        for (i, t) in tokens.enumerated() {
            guard t >= 0, Int(t) < c.vocab else { throw HarnessError(.badSpec, "token id \(t) outside the vocabulary") }
            weights.embed.dequantizeRow(Int(t), into: b.x + i * dim)
        }
        let parts = pool.parts
        let half = hd / 2
        for (li, layer) in weights.layers.enumerated() {
            // Attention block: norm, fused q/k/v rows, rope, cache, attention, output + residual.
            for i in 0..<m { Ops.rmsNorm(b.x + i * dim, layer.attnNorm, b.xn + i * dim, count: dim, eps: c.normEps) }
            b.prepDim.prepare(b.xn, count: m, q8: prepQ8, q4: prepQ4, plain: prepPlain)
            let qkvRows = dim + 2 * kvDim
            pool.run { id in
                let share = WorkerPool.share(qkvRows, id, parts)
                let qr = share.clamped(to: 0..<dim)
                let kr = share.clamped(to: dim..<(dim + kvDim))
                let vr = share.clamped(to: (dim + kvDim)..<qkvRows)
                if !qr.isEmpty { layer.q.multiply(rows: qr, input: b.prepDim, out: b.q, outStride: dim, kernels: ks) }
                if !kr.isEmpty {
                    layer.k.multiply(rows: (kr.lowerBound - dim)..<(kr.upperBound - dim), input: b.prepDim, out: b.k, outStride: kvDim, kernels: ks)
                }
                if !vr.isEmpty {
                    let lo = dim + kvDim
                    layer.v.multiply(rows: (vr.lowerBound - lo)..<(vr.upperBound - lo), input: b.prepDim, out: b.v, outStride: kvDim, kernels: ks)
                }
            }
            for i in 0..<m {
                let pos = p0 + i
                Ops.rope(b.q + i * dim, heads: c.heads, headDim: hd, cos: ropeCos + pos * half, sin: ropeSin + pos * half)
                Ops.rope(b.k + i * kvDim, heads: c.kvHeads, headDim: hd, cos: ropeCos + pos * half, sin: ropeSin + pos * half)
                kv.store(layer: li, pos: pos, keys: b.k + i * kvDim, values: b.v + i * kvDim)
            }
            let group = c.heads / c.kvHeads
            let items = m * c.heads
            let kvc = kv, scoreBase = scores, ctx = c.contextLength
            pool.run { id in
                let scratch = scoreBase + id * ctx
                for item in WorkerPool.share(items, id, parts) {
                    let i = item / c.heads, h = item % c.heads
                    let keys = UnsafeRawPointer(kvc.key(li, h / group, 0)), values = UnsafeRawPointer(kvc.value(li, h / group, 0))
                    let q = b.q + i * dim + h * hd, out = b.att + i * dim + h * hd
                    if kvc.half {
                        Ops.attend(KVFloat16.self, q: q, keys: keys, values: values, stride: hd, pos: p0 + i,
                                   headDim: hd, scores: scratch, out: out)
                    } else {
                        Ops.attend(KVFloat32.self, q: q, keys: keys, values: values, stride: hd, pos: p0 + i,
                                   headDim: hd, scores: scratch, out: out)
                    }
                }
            }
            b.prepDim.prepare(b.att, count: m, q8: prepQ8, q4: prepQ4, plain: prepPlain)
            pool.run { id in
                let rows = WorkerPool.share(dim, id, parts)
                layer.o.multiply(rows: rows, input: b.prepDim, out: b.tmp, outStride: dim, kernels: ks)
                for i in 0..<m { for r in rows { b.x[i * dim + r] += b.tmp[i * dim + r] } }
            }
            // MLP block: norm, fused gate/up rows with SiLU, down + residual.
            for i in 0..<m { Ops.rmsNorm(b.x + i * dim, layer.ffnNorm, b.xn + i * dim, count: dim, eps: c.normEps) }
            b.prepDim.prepare(b.xn, count: m, q8: prepQ8, q4: prepQ4, plain: prepPlain)
            pool.run { id in
                let rows = WorkerPool.share(hidden, id, parts)
                layer.gate.multiply(rows: rows, input: b.prepDim, out: b.gate, outStride: hidden, kernels: ks)
                layer.up.multiply(rows: rows, input: b.prepDim, out: b.up, outStride: hidden, kernels: ks)
                for i in 0..<m {
                    for r in rows {
                        let j = i * hidden + r
                        b.hidden[j] = Ops.silu(b.gate[j]) * b.up[j]
                    }
                }
            }
            b.prepHidden.prepare(b.hidden, count: m, q8: prepQ8, q4: prepQ4, plain: prepPlain)
            pool.run { id in
                let rows = WorkerPool.share(dim, id, parts)
                layer.down.multiply(rows: rows, input: b.prepHidden, out: b.tmp, outStride: dim, kernels: ks)
                for i in 0..<m { for r in rows { b.x[i * dim + r] += b.tmp[i * dim + r] } }
            }
        }
        position += m
        lastColumn = m - 1
    }

    private var lastColumn = 0

    /// Final norm and output head for the last position run; returns the greedy token.
    private func head() -> Int32 {
        let c = config, b = buffers, ks = kernels
        Ops.rmsNorm(b.x + lastColumn * c.dim, weights.outputNorm, b.xn, count: c.dim, eps: c.normEps)
        b.prepDim.prepare(b.xn, count: 1, q8: prepQ8, q4: prepQ4, plain: prepPlain)
        let parts = pool.parts, vocab = c.vocab, out = logits, headMatrix = weights.head
        pool.run { id in
            headMatrix.multiply(rows: WorkerPool.share(vocab, id, parts), input: b.prepDim, out: out, outStride: vocab, kernels: ks)
        }
        var best = 0
        for i in 1..<vocab where logits[i] > logits[best] { best = i }
        return Int32(best)
    }
}
