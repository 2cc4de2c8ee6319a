import Foundation
import HarnessCore
import HarnessCPU
import HarnessMetal
#if HARNESS_LLAMA
import HarnessLlama
#endif

/// The engines this binary carries: the raw loops always, llama.cpp where the build links it
/// (`HARNESS_LLAMA`: see Package.swift).
struct BuiltinEngines: EngineFactory {
    var engineNames: [String] {
        var names = [RawLoopCPU.engineName, RawLoopMetal.engineName]
        #if HARNESS_LLAMA
        names.append(LlamaCpp.engineName)
        #endif
        return names
    }

    /// What `rawloop-metal` runs on: `{"device": name, "emulated": bool}` in `harness info`
    /// (emulated: MetalCPU on Linux; its times are the CPU's, never a GPU's).
    struct MetalInfo: Encodable {
        let device: String
        let emulated: Bool
    }

    static var metal: MetalInfo? {
        MetalPlatform.deviceName.map { MetalInfo(device: $0, emulated: MetalPlatform.emulated) }
    }

    /// Which llama.cpp the `llamacpp` engine links (`harness info`), when the build has it.
    static var llamacpp: (any Encodable)? {
        #if HARNESS_LLAMA
        return LlamaBuild.current
        #else
        return nil
        #endif
    }

    func make(spec: TrialSpec, tuning: [String: TuningValue]) throws -> (engine: any Engine, coldCaches: [String]) {
        switch spec.engine {
        case RawLoopCPU.engineName:
            return try RawLoopCPU.make(spec: spec, tuning: tuning)
        case RawLoopMetal.engineName:
            return try RawLoopMetal.make(spec: spec, tuning: tuning)
        #if HARNESS_LLAMA
        case LlamaCpp.engineName:
            return try LlamaCpp.make(spec: spec, tuning: tuning)
        #endif
        default:
            throw HarnessError(.badSpec, "engine '\(spec.engine)' is not in this build")
        }
    }
}
