import Foundation
import Testing
@testable import HarnessCore
@testable import HarnessCPU
@testable import HarnessModel
@testable import HarnessMetal

/// The engine against device limits: memory sized to the run and checked against the device's
/// budget, the model split into views under a small maxBufferLength, the GPU family checked
/// before compiling.
@Suite struct MetalLimitsTests {
    /// A GGUF's trained context is not what a run needs: Llama-3.2-1B's shape (16 layers, 8 KV
    /// heads of 64) claims 131072 positions, 4 GiB each of keys and values before a token runs.
    @Test func theKVCacheHoldsTheRunNotTheTrainedContext() throws {
        let spec = TrialSpec(runId: "r", trialId: "t", engine: "rawloop-metal", model: Fixtures.path("t1", "Q8_0"),
                             promptTokens: 20, decodeTokens: 8)
        let (engine, _) = try RawLoopMetal.make(spec: spec, tuning: [:])
        let e = try #require(engine as? RawLoopMetal)
        let c = e.config
        #expect(c.contextLength == 28)
        #expect(e.keys.count == c.layers && e.values.count == c.layers)
        #expect(e.keys.allSatisfy { $0.length == 28 * c.kvDim * 4 })
        #expect(e.memory.kvCache == 2 * c.layers * 28 * c.kvDim * 4)
        #expect(e.act.scores.length == c.heads * 28 * 4)

        var llama1B = c
        (llama1B.dim, llama1B.layers, llama1B.heads, llama1B.kvHeads) = (2048, 16, 32, 8)
        (llama1B.hidden, llama1B.vocab, llama1B.contextLength) = (8192, 128_256, 131_072)
        #expect(MetalMemoryPlan.kvLayerBytes(llama1B) * llama1B.layers == 4 << 30)
        llama1B.contextLength = 512 + 128
        #expect(MetalMemoryPlan(config: llama1B, weights: 0, columns: 1).kvCache == 2 * 16 * 640 * 512 * 4)
    }

    #if !canImport(Metal)
    @Test func aRunOverTheDeviceBudgetIsRefusedBeforeAllocating() throws {
        let path = Fixtures.path("t1", "Q8_0")
        let small = device { $0.recommendedMaxWorkingSetSize = 100_000 }
        do {
            _ = try RawLoopMetal(modelPath: path, maxPositions: 28, device: small)
            Issue.record("a 100 kB budget was accepted")
        } catch let e as HarnessError {
            #expect(e.kind == .outOfMemory)
            #expect(e.message.contains("over the working-set budget of MetalCPU"), "\(e.message)")
        }
        #expect(small.currentAllocatedSize == 0)

        // Enough for decode (chunks of 1) but not for chunks of 16.
        let fits = try RawLoopMetal(modelPath: path, maxPositions: 60)
        let decodeOnly = UInt64(fits.memory.total + 1024)
        let tight = try RawLoopMetal(modelPath: path, maxPositions: 60, device: device { $0.recommendedMaxWorkingSetSize = decodeOnly })
        #expect(try tight.prefill(Fixtures.prompt, chunkWidth: 1) == fits.prefill(Fixtures.prompt, chunkWidth: 1))
        tight.reset()
        #expect { _ = try tight.prefill(Fixtures.prompt, chunkWidth: 16) } throws: { ($0 as? HarnessError)?.kind == .outOfMemory }
        // The model's whole trained context does not fit where its run does.
        let run = UInt64(MetalMemoryPlan(config: fits.config, weights: fits.weights.mappedBytes, columns: 1).total)
        #expect(throws: HarnessError.self) {
            _ = try RawLoopMetal(modelPath: path, device: device { $0.recommendedMaxWorkingSetSize = run })
        }
    }

    /// The largest tensor's page span, rounded up to a power of two: a limit every tensor fits,
    /// far below the file.
    func smallestLimit(_ path: String) throws -> Int {
        let file = try GGUFFile(path: path)
        let page = Int(getpagesize())
        let span = file.tensors.values.map { ($0.offset + $0.byteCount + page - 1) / page * page - $0.offset / page * page }.max()!
        return 1 << Int(ceil(log2(Double(span))))
    }

    @Test(arguments: Fixtures.all)
    func aSmallMaxBufferLengthSplitsTheModelWithTheSameResults(_ model: String) throws {
        let path = Fixtures.path(model)
        let limit = try smallestLimit(path)
        let split = try RawLoopMetal(modelPath: path, maxPositions: 50, device: device { $0.maxBufferLength = limit })
        #expect(split.weights.buffers.count >= 3, "\(model): \(split.weights.buffers.count) views under \(limit) bytes")
        #expect(split.weights.buffers.allSatisfy { $0.length <= limit })
        let whole = try RawLoopMetal(modelPath: path, maxPositions: 50)
        #expect(whole.weights.buffers.count == 1)
        #expect(try generate(split, chunk: 4, steps: 6) == generate(whole, chunk: 4, steps: 6))
    }

    @Test func aTensorLargerThanMaxBufferLengthIsNamed() throws {
        do {
            _ = try RawLoopMetal(modelPath: Fixtures.path("t1", "F32"), maxPositions: 8, device: device { $0.maxBufferLength = 32 << 10 })
            Issue.record("a 32 KiB limit was accepted for a model with 72 KiB tensors")
        } catch let e as HarnessError {
            #expect(e.kind == .outOfMemory)
            #expect(e.message.contains("over this device's maxBufferLength of 32768"), "\(e.message)")
        }
    }

    #endif

    @Test func theSplitPlanCoversEveryTensorWithPageAlignedViews() throws {
        let page = 4096
        var offset = 96
        let tensors: [GGUFTensor] = (0..<40).map { i in
            let bytes = [100, 5000, 17_000, 3000, 40_000][i % 5]
            defer { offset += (bytes + 31) / 32 * 32 }
            return GGUFTensor(name: "t\(i)", dims: [bytes], type: .f32, offset: offset, byteCount: bytes)
        }
        let ranges = try MetalWeights.plan(tensors: tensors, pageSize: page, maxLength: 64 << 10)
        #expect(ranges.count > 1)
        #expect(ranges.allSatisfy { $0.lowerBound % page == 0 && $0.upperBound % page == 0 && $0.count <= 64 << 10 })
        #expect(zip(ranges, ranges.dropFirst()).allSatisfy { $0.lowerBound < $1.lowerBound })
        for t in tensors {
            #expect(ranges.contains { $0.contains(t.offset) && t.offset + t.byteCount <= $0.upperBound }, "\(t.name)")
        }
        #expect(try MetalWeights.plan(tensors: tensors, pageSize: page, maxLength: 1 << 30).count == 1)
    }

    #if !canImport(Metal)
    /// iOS 18 runs on A12 / A13 (Apple 5 / 6), whose GPUs lack simd_sum and simd_max: the engine
    /// says so before compiling, where the compiler would only name a function.
    @Test func aGPUWithoutSIMDGroupReductionsIsRefused() throws {
        let a13 = device { $0.families = [.apple1, .apple2, .apple3, .apple4, .apple5, .apple6, .common1, .common2, .common3] }
        do {
            _ = try RawLoopMetal(modelPath: Fixtures.path("t1", "Q8_0"), maxPositions: 8, device: a13)
            Issue.record("an Apple 6 GPU was accepted")
        } catch let e as HarnessError {
            #expect(e.kind == .engineFailure)
            #expect(e.message.contains("needs an Apple GPU of family 7 or later (A14, M1) or a Mac2 GPU"), "\(e.message)")
        }
        #expect(a13.currentAllocatedSize == 0)
        // What the check spares: the emulated compiler, like Metal's, refuses the kernels there.
        #expect { _ = try a13.makeLibrary(source: MetalShaders.source, options: nil) } throws: {
            "\($0)".contains("simd_sum_needs_Apple_GPU_family_7_or_Mac2")
        }
        let mac = device { $0.families = [.mac2, .common1, .common2, .common3] }
        #expect(try RawLoopMetal(modelPath: Fixtures.path("t1", "Q8_0"), maxPositions: 8, device: mac).prefill([1, 2], chunkWidth: 1) >= 0)
    }
    #endif
}
