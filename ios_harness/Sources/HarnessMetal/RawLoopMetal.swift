#if canImport(Metal)
import Foundation
import HarnessCore
import HarnessCPU
import Metal

/// The Metal raw loop: the same llama decoder as `RawLoopCPU`, the same GGUF reader and config,
/// the same forward order, on the GPU. One command buffer per forward (a decode token or a
/// prefill chunk), dispatches in a serial compute encoder; greedy argmax on the CPU over shared
/// memory. GPU start/end times of every command buffer are kept (mach time base, the clock the
/// trial runner uses).
public final class RawLoopMetal: Engine {
    public static let engineName = "rawloop-metal"
    public static let engineVersion = "rawloop-metal 1"
    public static let tuningKeys: Set<String> = []

    public let name = RawLoopMetal.engineName
    public var version: String { "\(RawLoopMetal.engineVersion) (\(pipelines.sourceHash))" }
    public let config: LlamaConfig
    public let file: GGUFFile
    let device: any MTLDevice
    let queue: any MTLCommandQueue
    let pipelines: MetalPipelines
    let weights: any MTLBuffer
    let tensors: [String: GGUFTensor]
    var columns: Int
    var act: Activations
    let keys: any MTLBuffer
    let values: any MTLBuffer
    public private(set) var position = 0
    /// (gpuStartTime, gpuEndTime) in seconds of every command buffer since the last `reset`.
    public private(set) var gpuTimes: [(Double, Double)] = []
    private var lastColumn = 0

    public var contextLength: Int { config.contextLength }
    public var vocabSize: Int { config.vocab }
    public var threads: Int? { nil }
    public let bytesPerDecodeToken: Int
    private let layerBytes: Int
    private let embedRowBytes: Int
    public func bytesPerPrefillToken(chunkWidth m: Int) -> Int { embedRowBytes + (layerBytes + m - 1) / max(1, m) }

    /// Activation buffers for chunks of up to `columns` tokens (shared storage).
    struct Activations {
        let x, xn, q, k, v, att, gate, up, hidden, tmp, scores, logits: any MTLBuffer

        init(device: any MTLDevice, config c: LlamaConfig, columns m: Int) throws {
            func make(_ floats: Int) throws -> any MTLBuffer {
                guard let b = device.makeBuffer(length: max(4, floats * 4), options: .storageModeShared) else {
                    throw HarnessError(.outOfMemory, "cannot allocate a \(floats * 4)-byte Metal buffer")
                }
                return b
            }
            x = try make(m * c.dim)
            xn = try make(m * c.dim)
            q = try make(m * c.dim)
            k = try make(m * c.kvDim)
            v = try make(m * c.kvDim)
            att = try make(m * c.dim)
            gate = try make(m * c.hidden)
            up = try make(m * c.hidden)
            hidden = try make(m * c.hidden)
            tmp = try make(m * c.dim)
            scores = try make(m * c.heads * c.contextLength)
            logits = try make(c.vocab)
        }
    }

    public init(modelPath: String, dropPageCache: Bool = false) throws {
        guard let device = MTLCreateSystemDefaultDevice(), let queue = device.makeCommandQueue() else {
            throw HarnessError(.engineFailure, "no Metal device")
        }
        self.device = device
        self.queue = queue
        pipelines = try MetalPipelines.shared(device: device)
        file = try GGUFFile(path: modelPath, dropPageCache: dropPageCache)
        config = try LlamaConfig(file: file)
        tensors = file.tensors
        // The whole file as one no-copy buffer: tensors are addressed by their file offsets.
        guard let w = file.withPageAlignedStorage({ base, length in
            device.makeBuffer(bytesNoCopy: base, length: length, options: .storageModeShared, deallocator: nil)
        }) else {
            throw HarnessError(.outOfMemory, "cannot map the model into a Metal buffer")
        }
        weights = w
        let c = config
        guard let kb = device.makeBuffer(length: c.layers * c.contextLength * c.kvDim * 4, options: .storageModePrivate),
              let vb = device.makeBuffer(length: c.layers * c.contextLength * c.kvDim * 4, options: .storageModePrivate) else {
            throw HarnessError(.outOfMemory, "cannot allocate the KV cache")
        }
        keys = kb
        values = vb
        columns = 1
        act = try Activations(device: device, config: c, columns: 1)
        // Validate every tensor the way the CPU engine does (shapes, types) and count bytes.
        let cpuView = try LlamaLayout(file: file, config: c)
        layerBytes = cpuView.layerBytes
        embedRowBytes = cpuView.embedRowBytes
        bytesPerDecodeToken = cpuView.bytesPerDecodeToken
    }

    public func reset() {
        position = 0
        gpuTimes.removeAll(keepingCapacity: true)
    }

    public func prefill(_ tokens: [Int32], chunkWidth: Int) throws -> Int32 {
        guard !tokens.isEmpty, chunkWidth >= 1 else { throw HarnessError(.badSpec, "empty prompt or chunk width < 1") }
        try checkRoom(tokens.count)
        let m = min(chunkWidth, tokens.count)
        if columns < m {
            act = try Activations(device: device, config: config, columns: m)
            columns = m
        }
        var start = 0
        while start < tokens.count {
            let n = min(m, tokens.count - start)
            try forward(Array(tokens[start..<(start + n)]), withHead: start + n == tokens.count)
            start += n
        }
        return argmax()
    }

    public func decode(_ token: Int32) throws -> Int32 {
        try checkRoom(1)
        try forward([token], withHead: true)
        return argmax()
    }

    private func checkRoom(_ n: Int) throws {
        if position + n > config.contextLength {
            throw HarnessError(.contextOverflow, "position \(position + n) exceeds the context of \(config.contextLength)")
        }
    }

    /// Encodes one forward pass over `tokens` at the next positions (and the head for the last
    /// one), commits it and waits: same stage order as `RawLoopCPU.forward`.
    private func forward(_ tokens: [Int32], withHead: Bool) throws {
        let c = config, m = tokens.count, p0 = position
        let x = act.x.contents().assumingMemoryBound(to: Float.self)
        for (i, t) in tokens.enumerated() {
            guard t >= 0, Int(t) < c.vocab else { throw HarnessError(.badSpec, "token id \(t) outside the vocabulary") }
            try file.dequantizeRow(of: "token_embd.weight", row: Int(t), into: x + i * c.dim)
        }
        guard let cb = queue.makeCommandBuffer(), let enc = cb.makeComputeCommandEncoder(dispatchType: .serial) else {
            throw HarnessError(.engineFailure, "cannot create a Metal command buffer")
        }
        let kvLayer = c.contextLength * c.kvDim * 4
        for l in 0..<c.layers {
            let p = "blk.\(l)."
            norm(enc, act.x, p + "attn_norm.weight", act.xn, m)
            matvec(enc, p + "attn_q.weight", act.xn, c.dim, act.q, c.dim, rows: c.dim, cols: c.dim, m)
            matvec(enc, p + "attn_k.weight", act.xn, c.dim, act.k, c.kvDim, rows: c.kvDim, cols: c.dim, m)
            matvec(enc, p + "attn_v.weight", act.xn, c.dim, act.v, c.kvDim, rows: c.kvDim, cols: c.dim, m)
            rope(enc, act.q, heads: c.heads, stride: c.dim, p0: p0, m)
            rope(enc, act.k, heads: c.kvHeads, stride: c.kvDim, p0: p0, m)
            copy(enc, act.k, 0, keys, l * kvLayer + p0 * c.kvDim * 4, count: m * c.kvDim)
            copy(enc, act.v, 0, values, l * kvLayer + p0 * c.kvDim * 4, count: m * c.kvDim)
            attention(enc, layerOffset: l * kvLayer, p0: p0, m)
            matvec(enc, p + "attn_output.weight", act.att, c.dim, act.tmp, c.dim, rows: c.dim, cols: c.dim, m)
            add(enc, act.x, act.tmp, m * c.dim)
            norm(enc, act.x, p + "ffn_norm.weight", act.xn, m)
            matvec(enc, p + "ffn_gate.weight", act.xn, c.dim, act.gate, c.hidden, rows: c.hidden, cols: c.dim, m)
            matvec(enc, p + "ffn_up.weight", act.xn, c.dim, act.up, c.hidden, rows: c.hidden, cols: c.dim, m)
            siluMul(enc, m * c.hidden)
            matvec(enc, p + "ffn_down.weight", act.hidden, c.hidden, act.tmp, c.dim, rows: c.dim, cols: c.hidden, m)
            add(enc, act.x, act.tmp, m * c.dim)
        }
        if withHead {
            // Final norm of the last column only, then the head (output.weight or the tied embedding).
            var args = NormArgs(dim: UInt32(c.dim), eps: c.normEps, inStride: UInt32(c.dim), outStride: UInt32(c.dim))
            enc.setComputePipelineState(pipelines["rms_norm"])
            enc.setBuffer(act.x, offset: (m - 1) * c.dim * 4, index: 0)
            setTensor(enc, "output_norm.weight", index: 1)
            enc.setBuffer(act.xn, offset: 0, index: 2)
            enc.setBytes(&args, length: MemoryLayout<NormArgs>.stride, index: 3)
            enc.dispatchThreadgroups(MTLSize(width: 1, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 32, height: 1, depth: 1))
            let head = tensors["output.weight"] != nil ? "output.weight" : "token_embd.weight"
            matvec(enc, head, act.xn, c.dim, act.logits, c.vocab, rows: c.vocab, cols: c.dim, 1)
        }
        enc.endEncoding()
        cb.commit()
        cb.waitUntilCompleted()
        if cb.status == .error {
            throw HarnessError(.engineFailure, "Metal command buffer failed: \(cb.error.map { "\($0)" } ?? "unknown")")
        }
        gpuTimes.append((cb.gpuStartTime, cb.gpuEndTime))
        position += m
        lastColumn = m - 1
    }

    private func argmax() -> Int32 {
        let logits = act.logits.contents().assumingMemoryBound(to: Float.self)
        var best = 0
        for i in 1..<config.vocab where logits[i] > logits[best] { best = i }
        return Int32(best)
    }

    // MARK: dispatch helpers (argument structs mirror the MSL ones)

    struct MatvecArgs { var rows, cols, columns, inStride, outStride: UInt32 }
    struct NormArgs { var dim: UInt32; var eps: Float; var inStride, outStride: UInt32 }
    struct RopeArgs { var heads, headDim, stride, p0: UInt32; var base: Float }
    struct AttnArgs { var heads, kvHeads, headDim, dim, kvDim, p0, ctx: UInt32 }
    struct CopyArgs { var count, srcOffset, dstOffset: UInt32 }

    private func setTensor(_ enc: any MTLComputeCommandEncoder, _ name: String, index: Int) {
        enc.setBuffer(weights, offset: tensors[name]!.offset, index: index)
    }

    private func matvec(
        _ enc: any MTLComputeCommandEncoder, _ name: String, _ x: any MTLBuffer, _ inStride: Int,
        _ out: any MTLBuffer, _ outStride: Int, rows: Int, cols: Int, _ m: Int
    ) {
        let t = tensors[name]!
        let kernel = t.type == .q8_0 ? "matvec_q8_0" : t.type == .q4_0 ? "matvec_q4_0" : "matvec_f32"
        var args = MatvecArgs(rows: UInt32(rows), cols: UInt32(cols), columns: UInt32(m),
                              inStride: UInt32(inStride), outStride: UInt32(outStride))
        enc.setComputePipelineState(pipelines[kernel])
        setTensor(enc, name, index: 0)
        enc.setBuffer(x, offset: 0, index: 1)
        enc.setBuffer(out, offset: 0, index: 2)
        enc.setBytes(&args, length: MemoryLayout<MatvecArgs>.stride, index: 3)
        let rowsPerGroup = 8
        enc.dispatchThreadgroups(MTLSize(width: (rows + rowsPerGroup - 1) / rowsPerGroup, height: 1, depth: 1),
                                 threadsPerThreadgroup: MTLSize(width: 32 * rowsPerGroup, height: 1, depth: 1))
    }

    private func norm(_ enc: any MTLComputeCommandEncoder, _ x: any MTLBuffer, _ weight: String, _ out: any MTLBuffer, _ m: Int) {
        var args = NormArgs(dim: UInt32(config.dim), eps: config.normEps, inStride: UInt32(config.dim), outStride: UInt32(config.dim))
        enc.setComputePipelineState(pipelines["rms_norm"])
        enc.setBuffer(x, offset: 0, index: 0)
        setTensor(enc, weight, index: 1)
        enc.setBuffer(out, offset: 0, index: 2)
        enc.setBytes(&args, length: MemoryLayout<NormArgs>.stride, index: 3)
        enc.dispatchThreadgroups(MTLSize(width: m, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 32, height: 1, depth: 1))
    }

    private func rope(_ enc: any MTLComputeCommandEncoder, _ x: any MTLBuffer, heads: Int, stride: Int, p0: Int, _ m: Int) {
        var args = RopeArgs(heads: UInt32(heads), headDim: UInt32(config.headDim), stride: UInt32(stride),
                            p0: UInt32(p0), base: config.ropeBase)
        enc.setComputePipelineState(pipelines["rope"])
        enc.setBuffer(x, offset: 0, index: 0)
        enc.setBytes(&args, length: MemoryLayout<RopeArgs>.stride, index: 1)
        enc.dispatchThreads(MTLSize(width: heads * config.headDim / 2, height: m, depth: 1),
                            threadsPerThreadgroup: MTLSize(width: 32, height: 1, depth: 1))
    }

    private func copy(_ enc: any MTLComputeCommandEncoder, _ src: any MTLBuffer, _ srcOffset: Int,
                      _ dst: any MTLBuffer, _ dstOffset: Int, count: Int) {
        var args = CopyArgs(count: UInt32(count), srcOffset: 0, dstOffset: 0)
        enc.setComputePipelineState(pipelines["copy_floats"])
        enc.setBuffer(src, offset: srcOffset, index: 0)
        enc.setBuffer(dst, offset: dstOffset, index: 1)
        enc.setBytes(&args, length: MemoryLayout<CopyArgs>.stride, index: 2)
        enc.dispatchThreads(MTLSize(width: count, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 64, height: 1, depth: 1))
    }

    private func add(_ enc: any MTLComputeCommandEncoder, _ x: any MTLBuffer, _ y: any MTLBuffer, _ n: Int) {
        var count = UInt32(n)
        enc.setComputePipelineState(pipelines["add_into"])
        enc.setBuffer(x, offset: 0, index: 0)
        enc.setBuffer(y, offset: 0, index: 1)
        enc.setBytes(&count, length: 4, index: 2)
        enc.dispatchThreads(MTLSize(width: n, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 64, height: 1, depth: 1))
    }

    private func siluMul(_ enc: any MTLComputeCommandEncoder, _ n: Int) {
        var count = UInt32(n)
        enc.setComputePipelineState(pipelines["silu_mul"])
        enc.setBuffer(act.gate, offset: 0, index: 0)
        enc.setBuffer(act.up, offset: 0, index: 1)
        enc.setBuffer(act.hidden, offset: 0, index: 2)
        enc.setBytes(&count, length: 4, index: 3)
        enc.dispatchThreads(MTLSize(width: n, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 64, height: 1, depth: 1))
    }

    private func attention(_ enc: any MTLComputeCommandEncoder, layerOffset: Int, p0: Int, _ m: Int) {
        let c = config
        var args = AttnArgs(heads: UInt32(c.heads), kvHeads: UInt32(c.kvHeads), headDim: UInt32(c.headDim),
                            dim: UInt32(c.dim), kvDim: UInt32(c.kvDim), p0: UInt32(p0), ctx: UInt32(c.contextLength))
        enc.setComputePipelineState(pipelines["attention"])
        enc.setBuffer(act.q, offset: 0, index: 0)
        enc.setBuffer(keys, offset: layerOffset, index: 1)
        enc.setBuffer(values, offset: layerOffset, index: 2)
        enc.setBuffer(act.scores, offset: 0, index: 3)
        enc.setBuffer(act.att, offset: 0, index: 4)
        enc.setBytes(&args, length: MemoryLayout<AttnArgs>.stride, index: 5)
        enc.dispatchThreadgroups(MTLSize(width: c.heads, height: m, depth: 1), threadsPerThreadgroup: MTLSize(width: 32, height: 1, depth: 1))
    }
}
#endif
