import Dispatch
import MetalCPURuntime

/// One recorded dispatch: the kernel, the buffers bound when it was encoded, its geometry.
struct Dispatch: @unchecked Sendable {
    let kernel: CompiledKernel
    let bindings: [Binding?]
    let groups, groupSize, grid: MTLSize

    /// What Metal's validation would refuse about this dispatch, or nil.
    static func check(kernel: CompiledKernel, pipeline: CPUPipelineState, groups: MTLSize, groupSize: MTLSize,
                      grid: MTLSize, bindings: [Binding?]) -> String? {
        let t = groupSize
        guard t.width >= 1, t.height >= 1, t.depth >= 1 else {
            return "threadsPerThreadgroup \(t.width)x\(t.height)x\(t.depth) has an empty dimension"
        }
        let threads = t.width * t.height * t.depth
        if threads > pipeline.maxTotalThreadsPerThreadgroup {
            return "threadgroup of \(threads) threads exceeds the pipeline's maxTotalThreadsPerThreadgroup (\(pipeline.maxTotalThreadsPerThreadgroup))"
        }
        guard grid.width >= 1, grid.height >= 1, grid.depth >= 1, groups.width >= 1, groups.height >= 1, groups.depth >= 1 else {
            return "empty grid \(grid.width)x\(grid.height)x\(grid.depth)"
        }
        guard grid.width <= Int(UInt32.max), grid.height <= Int(UInt32.max), grid.depth <= Int(UInt32.max) else {
            return "grid \(grid.width)x\(grid.height)x\(grid.depth) is too large"
        }
        for arg in kernel.args {
            guard let b = bindings[arg.index] else {
                return "argument '\(arg.name)' [[buffer(\(arg.index))]] is not bound"
            }
            if b.offset + arg.minBytes > b.buffer.length {
                return "argument '\(arg.name)' [[buffer(\(arg.index))]] reads \(arg.minBytes) bytes at offset \(b.offset) of a \(b.buffer.length)-byte buffer"
            }
            if Int(bitPattern: b.buffer.base + b.offset) % max(1, arg.align) != 0 {
                return "argument '\(arg.name)' [[buffer(\(arg.index))]] at offset \(b.offset) is not aligned to \(arg.align) bytes"
            }
        }
        return nil
    }

    /// Runs every threadgroup (in parallel over the device's workers); returns why it failed.
    func run(device: MetalCPUDevice) -> String? {
        let pointers = UnsafeMutablePointer<UnsafeMutableRawPointer?>.allocate(capacity: bindings.count)
        let lengths = UnsafeMutablePointer<UInt64>.allocate(capacity: bindings.count)
        defer {
            pointers.deallocate()
            lengths.deallocate()
        }
        for (i, b) in bindings.enumerated() {
            pointers[i] = b.map { $0.buffer.base + $0.offset }
            lengths[i] = b.map { UInt64($0.buffer.length - $0.offset) } ?? 0
        }
        let d = UnsafeMutablePointer<mtlcpu_dispatch>.allocate(capacity: 1)
        defer { d.deallocate() }
        d.initialize(to: mtlcpu_dispatch())
        d.pointee.fn = kernel.fn
        d.pointee.buffers = UnsafePointer(pointers)
        d.pointee.buffer_lengths = UnsafePointer(lengths)
        d.pointee.groups = Self.uint3(groups)
        d.pointee.group_size = Self.uint3(groupSize)
        d.pointee.grid = Self.uint3(grid)
        d.pointee.use_ucontext = device.configuration.portableFibers ? 1 : 0
        d.pointee.stack_bytes = UInt32(device.configuration.stackBytes)
        let total = groups.width * groups.height * groups.depth
        let workers = max(1, min(device.configuration.workers, total))
        if workers == 1 {
            mtlcpu_run(d)
        } else {
            nonisolated(unsafe) let shared = d
            DispatchQueue.concurrentPerform(iterations: workers) { _ in mtlcpu_run(shared) }
        }
        guard d.pointee.failed != 0 else { return nil }
        let message = withUnsafeBytes(of: &d.pointee.error) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        return "kernel \(kernel.name): \(message)"
    }

    static func uint3(_ s: MTLSize) -> mtlcpu_uint3 {
        mtlcpu_uint3(x: UInt32(s.width), y: UInt32(s.height), z: UInt32(s.depth))
    }
}
