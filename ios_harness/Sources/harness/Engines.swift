import Foundation
import HarnessCore
import HarnessCPU
import HarnessMetal

/// The engines this binary carries.
struct BuiltinEngines: EngineFactory {
    var engineNames: [String] {
        [RawLoopCPU.engineName, RawLoopMetal.engineName]
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
