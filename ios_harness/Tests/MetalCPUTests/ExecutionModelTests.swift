import Testing
@testable import MetalCPU

/// Metal's execution model as the emulation runs it: position values, SIMD-group functions over
/// active lanes, barriers, threadgroup memory, non-uniform grids.
@Suite struct ExecutionModelTests {
    @Test func elementwiseKernelMatchesAScalarReference() throws {
        let gpu = GPU()
        let p = try gpu.pipeline("""
            kernel void axpy(device const float *x [[buffer(0)]], device float *y [[buffer(1)]],
                             constant uint &n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
                if (i < n) { y[i] = 2.5f * x[i] + y[i]; }
            }
            """, "axpy")
        let x = (0..<1000).map { Float($0) * 0.37 }, y = (0..<1000).map { Float($0).squareRoot() }
        let bx = gpu.floats(x), by = gpu.floats(y)
        let cb = gpu.run(p, buffers: [0: bx, 1: by], bytes: [2: [1000]], threads: size(1000), groupSize: size(64))
        #expect(cb.status == .completed, "\(failure(cb))")
        #expect(by.floats(1000) == zip(x, y).map { 2.5 * $0 + $1 })
    }

    @Test func positionValuesInANonUniformGrid() throws {
        let gpu = GPU()
        let p = try gpu.pipeline("""
            kernel void where(device uint *out [[buffer(0)]], uint2 g [[thread_position_in_grid]],
                              uint2 t [[thread_position_in_threadgroup]], uint2 tg [[threadgroup_position_in_grid]],
                              uint2 size [[threads_per_threadgroup]], uint2 grid [[threads_per_grid]],
                              uint index [[thread_index_in_threadgroup]], ushort lane [[thread_index_in_simdgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]], uint2 groups [[threadgroups_per_grid]]) {
                device uint *o = out + (g.y * grid.x + g.x) * 12;
                o[0] = t.x; o[1] = t.y; o[2] = tg.x; o[3] = tg.y; o[4] = size.x; o[5] = size.y;
                o[6] = index; o[7] = lane; o[8] = sg; o[9] = groups.x; o[10] = groups.y; o[11] = 1;
            }
            """, "where")
        let (w, h) = (37, 5), out = gpu.zeros(w * h * 12)
        let cb = gpu.run(p, buffers: [0: out], threads: size(w, h), groupSize: size(16, 2))
        #expect(cb.status == .completed, "\(failure(cb))")
        let v = out.words(w * h * 12)
        for y in 0..<h {
            for x in 0..<w {
                let o = (y * w + x) * 12
                let size = (min(16, w - x / 16 * 16), min(2, h - y / 2 * 2))
                let index = (y % 2) * size.0 + x % 16
                let expected: [Int] = [x % 16, y % 2, x / 16, y / 2, size.0, size.1, index, index % 32, index / 32, 3, 3, 1]
                #expect(v[o..<(o + 12)].map(Int.init) == expected, "thread (\(x), \(y))")
            }
        }
    }

    @Test func simdGroupFunctions() throws {
        let gpu = GPU()
        let p = try gpu.pipeline("""
            kernel void lanes(device const float *x [[buffer(0)]], device float *out [[buffer(1)]],
                              uint i [[thread_position_in_grid]], ushort lane [[thread_index_in_simdgroup]]) {
                float v = x[i];
                device float *o = out + i * 8;
                o[0] = simd_sum(v);
                o[1] = simd_max(v);
                o[2] = simd_min(v);
                o[3] = simd_shuffle_down(v, 1);
                o[4] = simd_shuffle_xor(v, 1);
                o[5] = simd_broadcast(v, 3);
                o[6] = simd_prefix_exclusive_sum(v);
                o[7] = simd_shuffle(v, ushort(lane / 2));
            }
            """, "lanes")
        let x = (0..<128).map { Float(($0 * 7919) % 23) - 11 }
        let out = gpu.zeros(128 * 8)
        let cb = gpu.run(p, buffers: [0: gpu.floats(x), 1: out], threads: size(128), groupSize: size(64))
        #expect(cb.status == .completed, "\(failure(cb))")
        let v = out.floats(128 * 8)
        for i in 0..<128 {
            let group = Array(x[(i / 32 * 32)..<(i / 32 * 32 + 32)]), lane = i % 32, o = i * 8
            #expect(v[o] == group.reduce(0, +))
            #expect(v[o + 1] == group.max()!)
            #expect(v[o + 2] == group.min()!)
            #expect(v[o + 3] == group[lane < 31 ? lane + 1 : lane])
            #expect(v[o + 4] == group[lane ^ 1])
            #expect(v[o + 5] == group[3])
            #expect(v[o + 6] == group[..<lane].reduce(0, +))
            #expect(v[o + 7] == group[lane / 2])
        }
    }

    @Test func reductionsCountOnlyTheLanesThatExist() throws {
        let gpu = GPU()
        // 40 threads a threadgroup: a full SIMD-group and one of 8 lanes.
        let p = try gpu.pipeline("""
            kernel void partial(device float *out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
                out[i] = simd_sum(1.0f) + 100.0f * simd_max(float(i % 40));
            }
            """, "partial")
        let out = gpu.zeros(80)
        let cb = gpu.run(p, buffers: [0: out], threads: size(80), groupSize: size(40))
        #expect(cb.status == .completed, "\(failure(cb))")
        let expected: [Float] = (0..<80).map { i in i % 40 < 32 ? 3132 : 3908 }
        #expect(out.floats(80) == expected)
    }

    @Test func readingALaneThatIsNotActiveFails() throws {
        let gpu = GPU()
        let p = try gpu.pipeline("""
            kernel void past(device float *out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
                out[i] = simd_shuffle_down(float(i), 1);
            }
            """, "past")
        let cb = gpu.run(p, buffers: [0: gpu.zeros(8)], threads: size(8), groupSize: size(8))
        #expect(cb.status == .error)
        #expect(failure(cb).contains("simd_shuffle_down reads a lane that is not active"), "\(failure(cb))")
    }

    /// A tree reduction in threadgroup memory: right only if every barrier holds every thread.
    static let reduction = """
        kernel void reduce(device const float *x [[buffer(0)]], device float *out [[buffer(1)]],
                           uint t [[thread_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]],
                           uint n [[threads_per_threadgroup]]) {
            threadgroup float s[256];
            s[t] = x[g * n + t];
            threadgroup_barrier(mem_flags::mem_threadgroup);
            for (uint k = n / 2; k > 0; k >>= 1) {
                if (t < k) { s[t] = s[t] + s[t + k]; }
                threadgroup_barrier(mem_flags::mem_threadgroup);
            }
            if (t == 0) { out[g] = s[0]; }
        }
        """

    static func reduced(_ x: [Float], groups: Int, n: Int) -> [Float] {
        (0..<groups).map { g in
            var s = Array(x[(g * n)..<((g + 1) * n)])
            var k = n / 2
            while k > 0 {
                for t in 0..<k { s[t] = s[t] + s[t + k] }
                k /= 2
            }
            return s[0]
        }
    }

    @Test(arguments: [false, true])
    func barriersAndThreadgroupMemory(portable: Bool) throws {
        let gpu = GPU { $0.portableFibers = portable; $0.workers = 2 }
        let p = try gpu.pipeline(Self.reduction, "reduce")
        let x = (0..<(64 * 256)).map { Float(($0 * 104_729) % 1000) / 7 }
        let out = gpu.zeros(64)
        let cb = gpu.run(p, buffers: [0: gpu.floats(x), 1: out], groups: size(64), groupSize: size(256))
        #expect(cb.status == .completed, "\(failure(cb))")
        #expect(out.floats(64) == Self.reduced(x, groups: 64, n: 256))
    }

    @Test func threadsThatReturnLeaveBarriersAndCollectives() throws {
        let gpu = GPU()
        let p = try gpu.pipeline("""
            kernel void early(device float *out [[buffer(0)]], uint t [[thread_index_in_threadgroup]]) {
                if (t >= 40) return;
                float s = simd_sum(1.0f);
                threadgroup_barrier(mem_flags::mem_device);
                out[t] = s;
            }
            """, "early")
        let out = gpu.zeros(64)
        let cb = gpu.run(p, buffers: [0: out], groups: size(1), groupSize: size(64))
        #expect(cb.status == .completed, "\(failure(cb))")
        let expected: [Float] = (0..<64).map { t in t < 32 ? 32 : t < 40 ? 8 : 0 }
        #expect(out.floats(64) == expected)
    }

    @Test func divergentCollectivesFailTheDispatch() throws {
        let gpu = GPU()
        let p = try gpu.pipeline("""
            kernel void diverge(device float *out [[buffer(0)]], ushort lane [[thread_index_in_simdgroup]]) {
                float v = 1.0f;
                if (lane < 16) { v = simd_sum(v); } else { v = simd_max(v); }
                out[lane] = v;
            }
            """, "diverge")
        let cb = gpu.run(p, buffers: [0: gpu.zeros(32)], groups: size(1), groupSize: size(32))
        #expect(cb.status == .error)
        #expect(failure(cb).contains("divergent SIMD-group functions"), "\(failure(cb))")
    }

    @Test func aThreadgroupThatCannotGoOnFails() throws {
        let gpu = GPU()
        let p = try gpu.pipeline("""
            kernel void stuck(device float *out [[buffer(0)]], ushort lane [[thread_index_in_simdgroup]]) {
                if (lane < 16) { threadgroup_barrier(mem_flags::mem_none); } else { out[lane] = simd_sum(1.0f); }
            }
            """, "stuck")
        let cb = gpu.run(p, buffers: [0: gpu.zeros(32)], groups: size(1), groupSize: size(32))
        #expect(cb.status == .error)
        #expect(failure(cb).contains("cannot go on"), "\(failure(cb))")
    }

    @Test func vectorsHalfAndMath() throws {
        let gpu = GPU()
        let p = try gpu.pipeline("""
            kernel void vectors(device const half *h [[buffer(0)]], device float4 *out [[buffer(1)]], uint i [[thread_position_in_grid]]) {
                float4 a = float4(float(h[i]), 2.0f, float2(3.0f, 4.0f));
                float4 b = float4(1.0f);
                out[i] = a * b + float4(0.0f, 0.0f, 0.0f, sqrt(16.0f) + exp(0.0f) + max(1.0f, 2.0f));
            }
            """, "vectors")
        let halves: [Float16] = [1.5, -2.25, 0.125, 65504]
        let hb = gpu.device.makeBuffer(length: 8, options: .storageModeShared)!
        hb.contents().copyMemory(from: halves, byteCount: 8)
        let out = gpu.zeros(16)
        let cb = gpu.run(p, buffers: [0: hb, 1: out], threads: size(4), groupSize: size(4))
        #expect(cb.status == .completed, "\(failure(cb))")
        let v = out.floats(16)
        for i in 0..<4 { #expect(Array(v[(i * 4)..<(i * 4 + 4)]) == [Float(halves[i]), 2, 3, 11]) }
    }

    @Test func workersDoNotChangeResults() throws {
        let x = (0..<(32 * 256)).map { Float(($0 * 31) % 97) * 0.01 }
        var results: [[Float]] = []
        for workers in [1, 3] {
            let gpu = GPU { $0.workers = workers }
            let out = gpu.zeros(32)
            let cb = gpu.run(try gpu.pipeline(Self.reduction, "reduce"), buffers: [0: gpu.floats(x), 1: out],
                             groups: size(32), groupSize: size(256))
            #expect(cb.status == .completed)
            results.append(out.floats(32))
        }
        #expect(results[0] == results[1])
    }
}
