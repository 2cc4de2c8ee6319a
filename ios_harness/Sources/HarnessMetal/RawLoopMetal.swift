import Foundation
import HarnessCore
import HarnessModel

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
    /// The engine, its shader source's hash, and on the CPU emulation a label saying so: nothing
    /// measured there is a GPU figure.
    public var version: String {
        "\(RawLoopMetal.engineVersion) (\(pipelines.sourceHash))" + (MetalPlatform.emulated ? " (emulated Metal on CPU)" : "")
    }
    public let config: LlamaConfig
    public let file: GGUFFile
    let device: any MTLDevice
    let queue: any MTLCommandQueue
    let pipelines: MetalPipelines
    let weights: MetalWeights
    let tensors: [String: GGUFTensor]
    var act: Activations
    /// One buffer per layer each: `[position][kv dim]` f32, for `config.contextLength` positions.
    let keys: [any MTLBuffer]
    let values: [any MTLBuffer]
    /// What is allocated on the device, as checked against its budget.
    private(set) var memory: MetalMemoryPlan
    public private(set) var position = 0
    /// (gpuStartTime, gpuEndTime) in seconds of every command buffer since the last `reset`.
    public private(set) var gpuTimes: [(Double, Double)] = []

    public var contextLength: Int { config.contextLength }
    public var vocabSize: Int { config.vocab }
    public var threads: Int? { nil }
    public let bytesPerDecodeToken: Int
    private let layerBytes: Int
    private let embedRowBytes: Int
    public func bytesPerPrefillToken(chunkWidth m: Int) -> Int { embedRowBytes + (layerBytes + m - 1) / max(1, m) }

    /// Activation buffers for chunks of up to `columns` tokens (shared storage).
    struct Activations {
        let columns: Int
        let x, xn, q, k, v, att, gate, up, hidden, tmp, scores, logits: any MTLBuffer

        init(device: any MTLDevice, config c: LlamaConfig, columns m: Int) throws {
            let b = try MetalMemoryPlan.activationFloats(c, columns: m).map { floats in
                try RawLoopMetal.buffer(device, floats * 4, .storageModeShared, "activations for chunks of \(m)")
            }
            columns = m
            (x, xn, q, k, v, att, gate, up, hidden, tmp, scores, logits) =
                (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11])
        }
    }

    /// `maxPositions` caps the KV cache and scores below the model's trained context (a run needs
    /// prompt + decode positions, not the 131072 a GGUF may claim); `device` defaults to the
    /// system's. Refuses, before allocating, a GPU without SIMD-group reductions and a plan over
    /// the device's working-set budget; splits the model into views the device can map.
    public init(modelPath: String, maxPositions: Int? = nil, device: (any MTLDevice)? = nil,
                dropPageCache: Bool = false) throws {
        guard let device = device ?? MTLCreateSystemDefaultDevice(), let queue = device.makeCommandQueue() else {
            throw HarnessError(.engineFailure, "no Metal device")
        }
        try Self.checkFamily(device)
        self.device = device
        self.queue = queue
        pipelines = try MetalPipelines.shared(device: device)
        file = try GGUFFile(path: modelPath, dropPageCache: dropPageCache)
        var c = try LlamaConfig(file: file)
        c.contextLength = min(c.contextLength, max(1, maxPositions ?? c.contextLength))
        config = c
        tensors = file.tensors
        // Validate every tensor the way the CPU engine does (shapes, types) and count bytes.
        let layout = try LlamaLayout(file: file, config: c)
        layerBytes = layout.layerBytes
        embedRowBytes = layout.embedRowBytes
        bytesPerDecodeToken = layout.bytesPerDecodeToken
        weights = try MetalWeights(file: file, device: device)
        memory = MetalMemoryPlan(config: c, weights: weights.mappedBytes, columns: 1)
        try memory.check(budget: device.recommendedMaxWorkingSetSize, device: device.name)
        let kvBytes = MetalMemoryPlan.kvLayerBytes(c)
        keys = try (0..<c.layers).map { _ in try Self.buffer(device, kvBytes, .storageModePrivate, "a layer's KV cache") }
        values = try (0..<c.layers).map { _ in try Self.buffer(device, kvBytes, .storageModePrivate, "a layer's KV cache") }
        act = try Activations(device: device, config: c, columns: 1)
    }

    /// The kernels' SIMD-group reductions (`simd_sum`, `simd_max`) need Apple GPU family 7
    /// (A14, M1) or a Mac2 GPU. iOS 18 still runs on A12 / A13, where they do not compile.
    static func checkFamily(_ device: any MTLDevice) throws {
        guard device.supportsFamily(.apple7) || device.supportsFamily(.mac2) else {
            throw HarnessError(.engineFailure,
                "rawloop-metal needs an Apple GPU of family 7 or later (A14, M1) or a Mac2 GPU: its kernels use "
                + "simd_sum and simd_max; \(device.name) is neither")
        }
    }

    /// A device buffer, or an `out_of_memory` error saying what it was for.
    static func buffer(_ device: any MTLDevice, _ bytes: Int, _ options: MTLResourceOptions, _ what: String) throws -> any MTLBuffer {
        let n = max(4, bytes)
        guard n <= device.maxBufferLength else {
            throw HarnessError(.outOfMemory, "\(what) needs a \(n)-byte buffer, over this device's maxBufferLength of \(device.maxBufferLength)")
        }
        guard let b = device.makeBuffer(length: n, options: options) else {
            throw HarnessError(.outOfMemory, "cannot allocate \(n) bytes for \(what)")
        }
        return b
    }

    public func reset() {
        position = 0
        gpuTimes.removeAll(keepingCapacity: true)
    }

    public func prefill(_ tokens: [Int32], chunkWidth: Int) throws -> Int32 {
        guard !tokens.isEmpty, chunkWidth >= 1 else { throw HarnessError(.badSpec, "empty prompt or chunk width < 1") }
        try checkRoom(tokens.count)
        let m = min(chunkWidth, tokens.count)
        if act.columns < m {
            let plan = MetalMemoryPlan(config: config, weights: weights.mappedBytes, columns: m)
            try plan.check(budget: device.recommendedMaxWorkingSetSize, device: device.name)
            act = try Activations(device: device, config: config, columns: m)
            memory = plan
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
        for l in 0..<c.layers {
            let p = "blk.\(l)."
            norm(enc, act.x, p + "attn_norm.weight", act.xn, m)
            matvec(enc, p + "attn_q.weight", act.xn, c.dim, act.q, c.dim, rows: c.dim, cols: c.dim, m)
            matvec(enc, p + "attn_k.weight", act.xn, c.dim, act.k, c.kvDim, rows: c.kvDim, cols: c.dim, m)
            matvec(enc, p + "attn_v.weight", act.xn, c.dim, act.v, c.kvDim, rows: c.kvDim, cols: c.dim, m)
            rope(enc, act.q, heads: c.heads, stride: c.dim, p0: p0, m)
            rope(enc, act.k, heads: c.kvHeads, stride: c.kvDim, p0: p0, m)
            copy(enc, act.k, 0, keys[l], p0 * c.kvDim * 4, count: m * c.kvDim)
            copy(enc, act.v, 0, values[l], p0 * c.kvDim * 4, count: m * c.kvDim)
            attention(enc, layer: l, p0: p0, m)
            matvec(enc, p + "attn_output.weight", act.att, c.dim, act.tmp, c.dim, rows: c.dim, cols: c.dim, m)
            add(enc, act.x, act.tmp, m * c.dim)
            norm(enc, act.x, p + "ffn_norm.weight", act.xn, m)
            matvec(enc, p + "ffn_gate.weight", act.xn, c.dim, act.gate, c.hidden, rows: c.hidden, cols: c.dim, m)
            matvec(enc, p + "ffn_up.weight", act.xn, c.dim, act.up, c.hidden, rows: c.hidden, cols: c.dim, m)
            siluMul(enc, m * c.hidden)
            matvec(enc, p + "ffn_down.weight", act.hidden, c.hidden, act.tmp, c.dim, rows: c.dim, cols: c.hidden, m)
            add(enc, act.x, act.tmp, m * c.dim)
        }
        if withHead { head(enc, lastColumn: m - 1) }
        enc.endEncoding()
        cb.commit()
        cb.waitUntilCompleted()
        if cb.status == .error {
            throw HarnessError(.engineFailure, "Metal command buffer failed: \(cb.error.map { "\($0)" } ?? "unknown")")
        }
        gpuTimes.append((cb.gpuStartTime, cb.gpuEndTime))
        position += m
    }

    private func argmax() -> Int32 {
        let logits = act.logits.contents().assumingMemoryBound(to: Float.self)
        var best = 0
        for i in 1..<config.vocab where logits[i] > logits[best] { best = i }
        return Int32(best)
    }

    /// The logits of the last position run (prefill's last token or the last decode step).
    public var logits: UnsafePointer<Float> { UnsafePointer(act.logits.contents().assumingMemoryBound(to: Float.self)) }
}
