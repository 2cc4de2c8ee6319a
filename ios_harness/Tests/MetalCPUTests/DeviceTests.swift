import Foundation
import Testing
@testable import MetalCPU

/// Buffers, limits, families and GPU times as the emulated device reports them.
@Suite struct DeviceTests {
    @Test func buffersHonourMaxBufferLength() throws {
        let gpu = GPU { $0.maxBufferLength = 64 << 10 }
        #expect(gpu.device.makeBuffer(length: 64 << 10, options: .storageModeShared) != nil)
        #expect(gpu.device.makeBuffer(length: (64 << 10) + 1, options: .storageModeShared) == nil)
        let page = MetalCPUDevice.pageSize
        let memory = UnsafeMutableRawPointer.allocate(byteCount: 32 * page, alignment: page)
        defer { memory.deallocate() }
        #expect(gpu.device.makeBuffer(bytesNoCopy: memory, length: 16 * page, options: .storageModeShared, deallocator: nil) != nil)
        #expect(gpu.device.makeBuffer(bytesNoCopy: memory, length: 32 * page, options: .storageModeShared, deallocator: nil) == nil
                || 32 * page <= 64 << 10)
    }

    @Test func noCopyBuffersAreTheCallersMemory() throws {
        let gpu = GPU()
        let page = MetalCPUDevice.pageSize
        let memory = UnsafeMutableRawPointer.allocate(byteCount: 4 * page, alignment: page)
        defer { memory.deallocate() }
        #expect(gpu.device.makeBuffer(bytesNoCopy: memory + 64, length: page, options: .storageModeShared, deallocator: nil) == nil)
        #expect(gpu.device.makeBuffer(bytesNoCopy: memory, length: page + 4, options: .storageModeShared, deallocator: nil) == nil)
        var released = 0
        do {
            let b = try #require(gpu.device.makeBuffer(bytesNoCopy: memory, length: 2 * page, options: .storageModeShared,
                                                       deallocator: { _, n in released = n }))
            #expect(b.contents() == memory && b.length == 2 * page)
            memory.storeBytes(of: 7.5, as: Float.self)
            let p = try gpu.pipeline("kernel void k(device float *x [[buffer(0)]]) { x[1] = x[0] * 2.0f; }", "k")
            #expect(gpu.run(p, buffers: [0: b], groups: size(1), groupSize: size(1)).status == .completed)
            #expect(memory.load(fromByteOffset: 4, as: Float.self) == 15)
        }
        #expect(released == 2 * page)
    }

    @Test func allocationsAreCountedAndPrivateStorageWorksOnTheDevice() throws {
        let gpu = GPU()
        let before = gpu.device.currentAllocatedSize
        var priv: (any MTLBuffer)? = gpu.device.makeBuffer(length: 1 << 20, options: .storageModePrivate)
        #expect(gpu.device.currentAllocatedSize == before + (1 << 20))
        let p = try gpu.pipeline("""
            kernel void k(device float *a [[buffer(0)]], device float *b [[buffer(1)]], uint i [[thread_position_in_grid]]) {
                b[i] = a[i];
            }
            """, "k")
        let src = gpu.floats([1, 2, 3, 4]), dst = gpu.zeros(4)
        #expect(gpu.run(p, buffers: [0: src, 1: priv!], threads: size(4), groupSize: size(4)).status == .completed)
        #expect(gpu.run(p, buffers: [0: priv!, 1: dst], threads: size(4), groupSize: size(4)).status == .completed)
        #expect(dst.floats(4) == [1, 2, 3, 4])
        priv = nil
        #expect(gpu.device.currentAllocatedSize == before + 32)
    }

    @Test func familiesAreConfigured() {
        #expect(MTLCreateSystemDefaultDevice()!.supportsFamily(.apple7))
        #expect(!MTLCreateSystemDefaultDevice()!.supportsFamily(.apple8))
        let old = GPU { $0.families = [.apple1, .apple2, .apple3, .apple4, .apple5, .apple6, .common1, .common2, .common3] }
        #expect(!old.device.supportsFamily(.apple7) && old.device.supportsFamily(.apple6))
    }

    @Test func olderFamiliesLackSIMDGroupReductions() throws {
        let a13 = GPU { $0.families = [.apple1, .apple2, .apple3, .apple4, .apple5, .apple6, .common1, .common2, .common3] }
        #expect(throws: MetalCPUError.self) {
            _ = try a13.pipeline("kernel void k(device float *x [[buffer(0)]]) { x[0] = simd_sum(x[0]); }", "k")
        }
        do {
            _ = try a13.pipeline("kernel void k(device float *x [[buffer(0)]]) { x[0] = simd_max(x[0]); }", "k")
        } catch {
            #expect("\(error)".contains("simd_max_needs_Apple_GPU_family_7_or_Mac2"), "\(error)")
        }
        _ = try a13.pipeline("kernel void k(device float *x [[buffer(0)]]) { x[0] = simd_shuffle(x[0], 1); }", "k")
        let mac = GPU { $0.families = [.mac2, .common1, .common2, .common3] }
        _ = try mac.pipeline("kernel void k(device float *x [[buffer(0)]]) { x[0] = simd_sum(x[0]); }", "k")
    }

    @Test func gpuTimesAreOnTheMonotonicClockAfterCompletion() throws {
        let gpu = GPU()
        let p = try gpu.pipeline(ExecutionModelTests.reduction, "reduce")
        func now() -> Double {
            var ts = timespec()
            clock_gettime(CLOCK_MONOTONIC, &ts)
            return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
        }
        let cb = gpu.queue.makeCommandBuffer()!
        let enc = cb.makeComputeCommandEncoder(dispatchType: .serial)!
        enc.setComputePipelineState(p)
        enc.setBuffer(gpu.zeros(16 * 256), offset: 0, index: 0)
        enc.setBuffer(gpu.zeros(16), offset: 0, index: 1)
        enc.dispatchThreadgroups(size(16), threadsPerThreadgroup: size(256))
        enc.endEncoding()
        #expect(cb.gpuStartTime == 0 && cb.gpuEndTime == 0)
        let t0 = now()
        cb.commit()
        cb.waitUntilCompleted()
        let t1 = now()
        #expect(cb.status == .completed)
        #expect(t0 <= cb.gpuStartTime && cb.gpuStartTime <= cb.gpuEndTime && cb.gpuEndTime <= t1)
    }

    @Test func commandBuffersRunInCommitOrder() throws {
        let gpu = GPU()
        let p = try gpu.pipeline("kernel void k(device float *x [[buffer(0)]]) { x[0] = x[0] * 2.0f + 1.0f; }", "k")
        let x = gpu.floats([0])
        var last: (any MTLCommandBuffer)?
        for _ in 0..<10 {
            let cb = gpu.queue.makeCommandBuffer()!
            let enc = cb.makeComputeCommandEncoder(dispatchType: .serial)!
            enc.setComputePipelineState(p)
            enc.setBuffer(x, offset: 0, index: 0)
            enc.dispatchThreadgroups(size(1), threadsPerThreadgroup: size(1))
            enc.endEncoding()
            cb.commit()
            last = cb
        }
        last!.waitUntilCompleted()
        #expect(x.floats(1) == [1023])
    }
}
