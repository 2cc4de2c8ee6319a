import Foundation
import HarnessCore
import HarnessCPU
import HarnessMetal

/// The engines this binary carries.
struct BuiltinEngines: EngineFactory {
    var engineNames: [String] {
        [RawLoopCPU.engineName, RawLoopMetal.engineName]
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

    func make(spec: TrialSpec, tuning: [String: TuningValue]) throws -> (engine: any Engine, coldCaches: [String]) {
        switch spec.engine {
        case RawLoopCPU.engineName:
            return try RawLoopCPU.make(spec: spec, tuning: tuning)
        case RawLoopMetal.engineName:
            return try RawLoopMetal.make(spec: spec, tuning: tuning)
        default:
            throw HarnessError(.badSpec, "engine '\(spec.engine)' is not in this build")
        }
    }
}
