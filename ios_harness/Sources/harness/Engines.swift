import Foundation
import HarnessCore
import HarnessCPU
#if canImport(Metal)
import HarnessMetal
#endif

/// The engines this binary carries.
struct BuiltinEngines: EngineFactory {
    var engineNames: [String] {
        var names = [RawLoopCPU.engineName]
        #if canImport(Metal)
        names.append(RawLoopMetal.engineName)
        #endif
        return names
    }

    func make(spec: TrialSpec, tuning: [String: TuningValue]) throws -> (engine: any Engine, coldCaches: [String]) {
        switch spec.engine {
        case RawLoopCPU.engineName:
            return try RawLoopCPU.make(spec: spec, tuning: tuning)
        #if canImport(Metal)
        case RawLoopMetal.engineName:
            return try RawLoopMetal.make(spec: spec, tuning: tuning)
        #endif
        default:
            throw HarnessError(.badSpec, "engine '\(spec.engine)' is not in this build")
        }
    }
}
