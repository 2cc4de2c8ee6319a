import Foundation
import HarnessCore

/// The compiled kernels, built once per process from `MetalShaders.source` with safe math
/// (no reassociation, so the fixed reduction orders hold), cached by the source's hash.
final class MetalPipelines {
    let device: any MTLDevice
    let sourceHash: String
    private var states: [String: any MTLComputePipelineState] = [:]

    nonisolated(unsafe) private static var cache: [String: MetalPipelines] = [:]
    /// Engines load on any thread (tests load several at once).
    private static let lock = NSLock()

    static func shared(device: any MTLDevice) throws -> MetalPipelines {
        var h = SHA256()
        Array(MetalShaders.source.utf8).withUnsafeBytes { h.update($0) }
        let key = h.finish().prefix(8).map { String(format: "%02x", $0) }.joined()
        return try lock.withLock {
            if let p = cache[key], p.device === device { return p }
            let p = try MetalPipelines(device: device, sourceHash: key)
            cache[key] = p
            return p
        }
    }

    private init(device: any MTLDevice, sourceHash: String) throws {
        self.device = device
        self.sourceHash = sourceHash
        let options = MTLCompileOptions()
        options.mathMode = .safe
        let library: any MTLLibrary
        do {
            library = try device.makeLibrary(source: MetalShaders.source, options: options)
        } catch {
            throw HarnessError(.engineFailure, "Metal shader compilation failed: \(error)")
        }
        for name in ["matvec_q8_0", "matvec_q4_0", "matvec_f32", "rms_norm", "rope", "copy_floats", "add_into",
                     "silu_mul", "attention"] {
            guard let f = library.makeFunction(name: name) else {
                throw HarnessError(.engineFailure, "Metal function \(name) missing")
            }
            let state = try device.makeComputePipelineState(function: f)
            // The kernels index lanes 0..<32 and the matvec runs 256-thread threadgroups.
            guard state.threadExecutionWidth == 32, state.maxTotalThreadsPerThreadgroup >= 256 else {
                throw HarnessError(.engineFailure,
                    "Metal kernel \(name) runs \(state.threadExecutionWidth)-wide SIMD-groups and at most "
                    + "\(state.maxTotalThreadsPerThreadgroup) threads a threadgroup; the kernels need 32 and 256")
            }
            states[name] = state
        }
    }

    subscript(_ name: String) -> any MTLComputePipelineState { states[name]! }
}
