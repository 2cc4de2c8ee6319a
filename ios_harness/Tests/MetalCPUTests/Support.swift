import MetalCPU
import Testing

/// Compiles a shader and runs one dispatch of it: what every MetalCPU test needs.
struct GPU {
    let device: MetalCPUDevice
    let queue: any MTLCommandQueue

    init(_ configure: (inout MetalCPUDevice.Configuration) -> Void = { _ in }) {
        var c = MetalCPUDevice.Configuration()
        configure(&c)
        device = MetalCPUDevice(configuration: c)
        queue = device.makeCommandQueue()!
    }

    static let header = "#include <metal_stdlib>\nusing namespace metal;\n"

    /// Safe math (no contraction), as the engine compiles.
    func pipeline(_ source: String, _ name: String, mathMode: MTLMathMode = .safe) throws -> any MTLComputePipelineState {
        let options = MTLCompileOptions()
        options.mathMode = mathMode
        let library = try device.makeLibrary(source: Self.header + source, options: options)
        return try device.makeComputePipelineState(function: try #require(library.makeFunction(name: name)))
    }

    func floats(_ values: [Float]) -> any MTLBuffer {
        let b = device.makeBuffer(length: max(4, values.count * 4), options: .storageModeShared)!
        b.contents().copyMemory(from: values, byteCount: values.count * 4)
        return b
    }

    func zeros(_ count: Int) -> any MTLBuffer { device.makeBuffer(length: count * 4, options: .storageModeShared)! }

    /// One dispatch: `threads` as dispatchThreads, else `groups` as dispatchThreadgroups.
    @discardableResult
    func run(_ pipeline: any MTLComputePipelineState, buffers: [Int: any MTLBuffer], bytes: [Int: [UInt32]] = [:],
             threads: MTLSize? = nil, groups: MTLSize? = nil, groupSize: MTLSize) -> any MTLCommandBuffer {
        let cb = queue.makeCommandBuffer()!
        let enc = cb.makeComputeCommandEncoder(dispatchType: .serial)!
        enc.setComputePipelineState(pipeline)
        for (i, b) in buffers { enc.setBuffer(b, offset: 0, index: i) }
        for (i, words) in bytes { words.withUnsafeBytes { enc.setBytes($0.baseAddress!, length: $0.count, index: i) } }
        if let threads { enc.dispatchThreads(threads, threadsPerThreadgroup: groupSize) }
        if let groups { enc.dispatchThreadgroups(groups, threadsPerThreadgroup: groupSize) }
        enc.endEncoding()
        cb.commit()
        cb.waitUntilCompleted()
        return cb
    }
}

func size(_ w: Int, _ h: Int = 1, _ d: Int = 1) -> MTLSize { MTLSize(width: w, height: h, depth: d) }

extension MTLBuffer {
    func floats(_ n: Int) -> [Float] { Array(UnsafeBufferPointer(start: contents().assumingMemoryBound(to: Float.self), count: n)) }
    func words(_ n: Int) -> [UInt32] { Array(UnsafeBufferPointer(start: contents().assumingMemoryBound(to: UInt32.self), count: n)) }
}

/// What a failed command buffer says.
func failure(_ cb: any MTLCommandBuffer) -> String { cb.error.map { "\($0)" } ?? "" }
