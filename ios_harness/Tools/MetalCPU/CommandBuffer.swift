import Dispatch
import Foundation
import MetalCPURuntime
#if canImport(Glibc)
import Glibc
#endif

final class CPUCommandQueue: MTLCommandQueue, @unchecked Sendable {
    let device: MetalCPUDevice
    /// Command buffers run here one after another, in commit order.
    let serial = DispatchQueue(label: "MetalCPU.commandQueue")

    init(device: MetalCPUDevice) { self.device = device }

    func makeCommandBuffer() -> (any MTLCommandBuffer)? { CPUCommandBuffer(queue: self) }
}

/// Records dispatches, then runs them on its queue's thread after `commit`. A mistake Metal's
/// validation layer would stop at (an unbound buffer, a threadgroup too large, bytes over 4 KiB,
/// a buffer too short for its argument) makes the command buffer fail with a message instead.
final class CPUCommandBuffer: MTLCommandBuffer, @unchecked Sendable {
    let queue: CPUCommandQueue
    private let condition = NSCondition()
    private var dispatches: [Dispatch] = []
    private var encodeError: String?
    private var encoding = false
    private var _status = MTLCommandBufferStatus.notEnqueued
    private var _error: MetalCPUError?
    private var _start = 0.0, _end = 0.0

    init(queue: CPUCommandQueue) { self.queue = queue }

    var status: MTLCommandBufferStatus { condition.withLock { _status } }
    var error: (any Error)? { condition.withLock { _error } }
    var gpuStartTime: Double { condition.withLock { _status == .completed || _status == .error ? _start : 0 } }
    var gpuEndTime: Double { condition.withLock { _status == .completed || _status == .error ? _end : 0 } }

    func makeComputeCommandEncoder(dispatchType: MTLDispatchType) -> (any MTLComputeCommandEncoder)? {
        if encoding {
            fail("an encoder was made while another was still encoding")
            return nil
        }
        encoding = true
        return CPUComputeEncoder(commandBuffer: self)
    }

    func fail(_ message: String) {
        if encodeError == nil { encodeError = message }
    }

    func record(_ d: Dispatch) { dispatches.append(d) }

    func endEncoding() { encoding = false }

    func commit() {
        if encoding { fail("committed while an encoder was still encoding (endEncoding was not called)") }
        condition.withLock { _status = .committed }
        queue.serial.async { self.execute() }
    }

    func waitUntilCompleted() {
        condition.withLock {
            while _status != .completed && _status != .error { condition.wait() }
        }
    }

    private func execute() {
        let start = Self.now()
        var failure = encodeError.map { MetalCPUError($0) }
        if failure == nil {
            for d in dispatches {
                if let message = d.run(device: queue.device) {
                    failure = MetalCPUError(message)
                    break
                }
            }
        }
        dispatches.removeAll()
        let end = Self.now()
        condition.withLock {
            _start = start
            _end = end
            _error = failure
            _status = failure == nil ? .completed : .error
            condition.broadcast()
        }
    }

    /// Seconds on CLOCK_MONOTONIC: the clock HarnessCore's SystemClock reads on Linux, as Metal's
    /// GPU times are on the clock the trial runner reads on Apple platforms.
    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}

final class CPUComputeEncoder: MTLComputeCommandEncoder {
    private let commandBuffer: CPUCommandBuffer
    private var pipeline: CPUPipelineState?
    private var bindings = [Binding?](repeating: nil, count: Int(MTLCPU_MAX_BUFFERS))

    init(commandBuffer: CPUCommandBuffer) { self.commandBuffer = commandBuffer }

    func setComputePipelineState(_ state: any MTLComputePipelineState) {
        guard let p = state as? CPUPipelineState else { return commandBuffer.fail("a pipeline from another device") }
        pipeline = p
    }

    func setBuffer(_ buffer: (any MTLBuffer)?, offset: Int, index: Int) {
        guard bindings.indices.contains(index) else { return commandBuffer.fail("buffer index \(index) is out of range") }
        guard let buffer else {
            bindings[index] = nil
            return
        }
        guard let b = buffer as? CPUBuffer else { return commandBuffer.fail("a buffer from another device") }
        guard offset >= 0, offset <= b.length else {
            return commandBuffer.fail("setBuffer index \(index): offset \(offset) is outside the buffer (length \(b.length))")
        }
        bindings[index] = Binding(buffer: b, offset: offset)
    }

    func setBytes(_ bytes: UnsafeRawPointer, length: Int, index: Int) {
        guard bindings.indices.contains(index) else { return commandBuffer.fail("buffer index \(index) is out of range") }
        guard length > 0, length <= 4096 else { return commandBuffer.fail("setBytes of \(length) bytes (Metal allows 1...4096)") }
        // A plain copy: the argument's size is checked against its MSL type before dispatch.
        let copy = UnsafeMutableRawPointer.allocate(byteCount: length, alignment: 64)
        copy.copyMemory(from: bytes, byteCount: length)
        bindings[index] = Binding(buffer: CPUBuffer(base: copy, length: length, isPrivate: false) { copy.deallocate() },
                                  offset: 0)
    }

    func dispatchThreadgroups(_ threadgroupsPerGrid: MTLSize, threadsPerThreadgroup: MTLSize) {
        let g = threadgroupsPerGrid, t = threadsPerThreadgroup
        add(groups: g, groupSize: t,
            grid: MTLSize(width: g.width * t.width, height: g.height * t.height, depth: g.depth * t.depth))
    }

    func dispatchThreads(_ threadsPerGrid: MTLSize, threadsPerThreadgroup: MTLSize) {
        let n = threadsPerGrid, t = threadsPerThreadgroup
        func up(_ a: Int, _ b: Int) -> Int { b > 0 ? (a + b - 1) / b : 0 }
        add(groups: MTLSize(width: up(n.width, t.width), height: up(n.height, t.height), depth: up(n.depth, t.depth)),
            groupSize: t, grid: n)
    }

    func endEncoding() { commandBuffer.endEncoding() }

    private func add(groups: MTLSize, groupSize: MTLSize, grid: MTLSize) {
        guard let pipeline else { return commandBuffer.fail("dispatch without a pipeline state") }
        let kernel = pipeline.kernel
        if let problem = Dispatch.check(kernel: kernel, pipeline: pipeline, groups: groups, groupSize: groupSize,
                                        grid: grid, bindings: bindings) {
            return commandBuffer.fail("kernel \(kernel.name): \(problem)")
        }
        commandBuffer.record(Dispatch(kernel: kernel, bindings: bindings, groups: groups, groupSize: groupSize, grid: grid))
    }
}

struct Binding {
    let buffer: CPUBuffer
    let offset: Int
}
