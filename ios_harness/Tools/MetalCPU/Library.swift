import MetalCPURuntime

/// One kernel of a loaded shader library.
struct CompiledKernel: @unchecked Sendable {
    struct Arg: Sendable {
        let index: Int
        let minBytes: Int
        let align: Int
        let name: String
    }

    let name: String
    let fn: mtlcpu_kernel_fn
    let args: [Arg]
    let maxThreads: Int
}

/// A shader library compiled to a shared object and loaded (never unloaded: pipelines may
/// outlive the library object, as on Metal).
final class CompiledLibrary: @unchecked Sendable {
    let kernels: [String: CompiledKernel]

    init(kernels: [String: CompiledKernel]) { self.kernels = kernels }
}

final class CPULibrary: MTLLibrary {
    let compiled: CompiledLibrary

    init(compiled: CompiledLibrary) { self.compiled = compiled }

    var functionNames: [String] { compiled.kernels.keys.sorted() }

    func makeFunction(name: String) -> (any MTLFunction)? {
        compiled.kernels[name].map(CPUFunction.init)
    }
}

final class CPUFunction: MTLFunction {
    let kernel: CompiledKernel
    var name: String { kernel.name }

    init(kernel: CompiledKernel) { self.kernel = kernel }
}

final class CPUPipelineState: MTLComputePipelineState {
    let kernel: CompiledKernel
    /// Apple GPUs run 32 threads per SIMD-group; so does the emulation.
    var threadExecutionWidth: Int { Int(MTLCPU_SIMD_WIDTH) }
    var maxTotalThreadsPerThreadgroup: Int { kernel.maxThreads > 0 ? min(1024, kernel.maxThreads) : 1024 }

    init(kernel: CompiledKernel) { self.kernel = kernel }
}
