import Testing
@testable import MetalCPU

/// What the emulation refuses, and how it says so: shaders it cannot run fail to compile with
/// clang's or the scanner's message; dispatches Metal's validation would stop fail their
/// command buffer; a kernel that runs past a buffer fails the dispatch instead of crashing.
@Suite struct ValidationTests {
    func compileError(_ source: String) -> String {
        do {
            _ = try GPU().pipeline(source, "k")
            return ""
        } catch {
            return "\(error)"
        }
    }

    @Test func whatThePreludeDoesNotMapFailsWithClangsMessage() {
        let e = compileError("""
            kernel void k(device float *o [[buffer(0)]]) {
                simdgroup_float8x8 tile;
                o[0] = 1.0f;
            }
            """)
        #expect(e.contains("MSL compilation failed"), "\(e)")
        #expect(e.contains("shader.metal:4:") && e.contains("error: unknown type name 'simdgroup_float8x8'"), "\(e)")
        let texture = compileError("kernel void k(texture2d<float> t [[texture(0)]], device float *o [[buffer(0)]]) {}")
        #expect(texture.contains("[[texture(0)]], which MetalCPU does not emulate"), "\(texture)")
    }

    @Test func unknownAttributesAreErrors() {
        let e = compileError("""
            constant bool flag [[function_constant(0)]];
            kernel void k(device float *o [[buffer(0)]]) { o[0] = flag ? 1.0f : 0.0f; }
            """)
        #expect(e.contains("function_constant") && e.contains("error:"), "\(e)")
    }

    @Test func kernelParametersNeedAnAttributeTheEmulationKnows() {
        let bare = compileError("kernel void k(device float *o, uint i [[thread_position_in_grid]]) { o[i] = 1.0f; }")
        #expect(bare.contains("parameter 'device float * o' has no attribute"), "\(bare)")
        let stage = compileError("kernel void k(device float *o [[buffer(0)]], float4 p [[stage_in]]) { o[0] = p.x; }")
        #expect(stage.contains("[[stage_in]], which MetalCPU does not emulate"), "\(stage)")
        let byValue = compileError("kernel void k(float x [[buffer(0)]]) {}")
        #expect(byValue.contains("passed by value"), "\(byValue)")
        let position = compileError("kernel void k(device float *o [[buffer(0)]], float i [[thread_position_in_grid]]) {}")
        #expect(position.contains("has type 'float'"), "\(position)")
    }

    @Test func maxTotalThreadsPerThreadgroupIsRead() throws {
        let gpu = GPU()
        let p = try gpu.pipeline("""
            [[max_total_threads_per_threadgroup(64)]]
            kernel void k(device float *o [[buffer(0)]], uint i [[thread_position_in_grid]]) { o[i] = 1.0f; }
            """, "k")
        #expect(p.maxTotalThreadsPerThreadgroup == 64 && p.threadExecutionWidth == 32)
        let cb = gpu.run(p, buffers: [0: gpu.zeros(128)], threads: size(128), groupSize: size(128))
        #expect(cb.status == .error)
        #expect(failure(cb).contains("exceeds the pipeline's maxTotalThreadsPerThreadgroup (64)"), "\(failure(cb))")
    }

    static let copy = """
        struct Args { uint n; uint scale; };
        kernel void k(device const float *x [[buffer(0)]], device float *y [[buffer(1)]],
                      constant Args &a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
            if (i < a.n) { y[i] = x[i] * float(a.scale); }
        }
        """

    @Test func unboundBuffersAndShortArgumentsFailTheCommandBuffer() throws {
        let gpu = GPU()
        let p = try gpu.pipeline(Self.copy, "k")
        let unbound = gpu.run(p, buffers: [0: gpu.zeros(4)], bytes: [2: [4, 1]], threads: size(4), groupSize: size(4))
        #expect(unbound.status == .error)
        #expect(failure(unbound).contains("kernel k: argument 'y' [[buffer(1)]] is not bound"), "\(failure(unbound))")
        // A Swift struct one field short of the MSL one.
        let short = gpu.run(p, buffers: [0: gpu.zeros(4), 1: gpu.zeros(4)], bytes: [2: [4]], threads: size(4), groupSize: size(4))
        #expect(short.status == .error)
        #expect(failure(short).contains("argument 'a' [[buffer(2)]] reads 8 bytes at offset 0 of a 4-byte buffer"), "\(failure(short))")
        let ok = gpu.run(p, buffers: [0: gpu.floats([1, 2, 3, 4]), 1: gpu.zeros(4)], bytes: [2: [4, 3]], threads: size(4), groupSize: size(4))
        #expect(ok.status == .completed, "\(failure(ok))")
    }

    @Test func encodingMistakesFailTheCommandBuffer() throws {
        let gpu = GPU()
        let p = try gpu.pipeline(Self.copy, "k")
        let big = gpu.run(p, buffers: [0: gpu.zeros(4), 1: gpu.zeros(4)], bytes: [2: [UInt32](repeating: 1, count: 1025)],
                          threads: size(4), groupSize: size(4))
        #expect(failure(big).contains("setBytes of 4100 bytes"), "\(failure(big))")
        let huge = gpu.run(p, buffers: [0: gpu.zeros(4), 1: gpu.zeros(4)], bytes: [2: [4, 1]], groups: size(1), groupSize: size(2048))
        #expect(failure(huge).contains("2048 threads exceeds"), "\(failure(huge))")
        let cb = gpu.queue.makeCommandBuffer()!
        _ = cb.makeComputeCommandEncoder(dispatchType: .serial)!
        cb.commit()
        cb.waitUntilCompleted()
        #expect(failure(cb).contains("endEncoding was not called"), "\(failure(cb))")
    }

    @Test func runningPastABufferFailsTheDispatch() throws {
        let gpu = GPU()
        let p = try gpu.pipeline("""
            kernel void k(device float *y [[buffer(0)]], constant uint &n [[buffer(1)]], uint i [[thread_position_in_grid]]) {
                y[i * n] = 1.0f;
            }
            """, "k")
        let y = gpu.zeros(256)
        let cb = gpu.run(p, buffers: [0: y], bytes: [1: [300]], threads: size(2), groupSize: size(2))
        #expect(cb.status == .error)
        #expect(failure(cb).contains("thread (1,0,0): memory fault"), "\(failure(cb))")
        #expect(failure(cb).contains("bytes past the end of [[buffer(0)]] (1024 bytes from its bound offset)"), "\(failure(cb))")
        // The device goes on working after a fault.
        let again = gpu.run(p, buffers: [0: y], bytes: [1: [1]], threads: size(256), groupSize: size(64))
        #expect(again.status == .completed)
        #expect(y.floats(256).allSatisfy { $0 == 1 })
    }

    @Test func integerDivisionByZeroFailsTheDispatch() throws {
        let gpu = GPU()
        let p = try gpu.pipeline("""
            kernel void k(device int *y [[buffer(0)]], constant int &d [[buffer(1)]], uint i [[thread_position_in_grid]]) {
                y[i] = 100 / (d - int(i));
            }
            """, "k")
        let cb = gpu.run(p, buffers: [0: gpu.zeros(4)], bytes: [1: [2]], threads: size(4), groupSize: size(4))
        #expect(cb.status == .error)
        #expect(failure(cb).contains("thread (2,0,0): integer division by zero"), "\(failure(cb))")
    }

    @Test func aStackOverflowFailsTheDispatch() throws {
        let gpu = GPU { $0.stackBytes = 16 << 10 }
        let p = try gpu.pipeline("""
            kernel void k(device float *y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
                float big[16384];
                for (uint j = 0; j < 16384; j++) { big[j] = float(j + i); }
                y[i] = big[(i * 977) % 16384];
            }
            """, "k")
        let cb = gpu.run(p, buffers: [0: gpu.zeros(4)], threads: size(4), groupSize: size(4))
        #expect(cb.status == .error)
        #expect(failure(cb).contains("stack overflow"), "\(failure(cb))")
    }
}
