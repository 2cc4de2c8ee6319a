import Foundation

/// Builds the engine a spec names. The CLI and the app each pass one that knows their engines.
public protocol EngineFactory {
    /// Engine names this factory can build.
    var engineNames: [String] { get }
    /// Loads the spec's model into the named engine with the merged tuning parameters;
    /// returns the engine and the caches it really started cold.
    func make(spec: TrialSpec, tuning: [String: TuningValue]) throws -> (engine: any Engine, coldCaches: [String])
}

/// `harness run`: spec file in, result file out (atomically), sentinel line, exit code.
/// Shared by the CLI and the iOS app so both behave identically.
public enum SpecRun {
    /// Exit codes: 0 ok result written; 2 error result written; 3 the result could not be written.
    public static let exitOK: Int32 = 0
    public static let exitErrorResult: Int32 = 2
    public static let exitUnwritable: Int32 = 3

    public static func sentinel(trialId: String, path: String) -> String {
        "HARNESS_DONE \(trialId) \(path)"
    }

    /// `resolve` maps a device path the spec names (`model`, `tuning_table`; with the field's name)
    /// to the file opened (the app: under Documents; the CLI: as given); the result keeps the
    /// spec's own `model`. A `tuningPath` from the command line wins over the spec's `tuning_table`. `emit` takes the sentinel,
    /// `diagnose` what went wrong when no result could be written.
    public static func execute(
        specPath: String, outPath: String, tuningPath: String?, factory: any EngineFactory,
        runner: TrialRunner = TrialRunner(thermal: Thermal.platformProbe()),
        resolve: (_ field: String, _ path: String) throws -> String = { $1 },
        interrupted: () -> String? = { nil },
        print emit: (String) -> Void = Console.line,
        diagnose: (String) -> Void = Console.errorLine
    ) -> Int32 {
        var result = produce(
            specPath: specPath, tuningPath: tuningPath, factory: factory, runner: runner, resolve: resolve)
        if let reason = interrupted(), result.status == .ok {
            // Keep the measurements as evidence, but the trial does not count.
            result.status = .error
            result.error = HarnessError(.interrupted, reason)
        }
        do {
            try result.validate()
            try AtomicFile.write(ProtocolJSON.encoder().encode(result), to: outPath)
        } catch {
            diagnose("harness: cannot write result: \(error)")
            return exitUnwritable
        }
        emit(sentinel(trialId: result.trialId, path: outPath))
        return result.status == .ok ? exitOK : exitErrorResult
    }

    /// The result for a spec: an ok result, or an error result naming what went wrong.
    public static func produce(
        specPath: String, tuningPath: String?, factory: any EngineFactory, runner: TrialRunner,
        resolve: (_ field: String, _ path: String) throws -> String = { $1 }
    ) -> TrialResult {
        let spec: TrialSpec
        switch SpecLoader.load(path: specPath) {
        case .failure(let error, let id):
            var r = TrialResult(
                runId: id.runId, trialId: id.trialId, status: .error, error: error, engine: id.engine,
                engineVersion: "unknown", harnessBuild: HarnessBuild.id, model: id.model,
                promptTokens: id.promptTokens, chunkWidth: id.chunkWidth)
            r.threads = nil
            return r
        case .spec(let s):
            spec = s
        }
        var base = TrialResult(
            runId: spec.runId, trialId: spec.trialId, status: .error, engine: spec.engine,
            engineVersion: "unknown", harnessBuild: HarnessBuild.id, model: spec.model,
            promptTokens: spec.promptTokens, chunkWidth: spec.chunkWidth)
        base.threads = spec.threads
        base.tuning = spec.tuning
        do {
            guard factory.engineNames.contains(spec.engine) else {
                throw HarnessError(.badSpec, "engine '\(spec.engine)' is not in this build (have: \(factory.engineNames.joined(separator: ", ")))")
            }
            if let b = spec.build, b != HarnessBuild.id {
                throw HarnessError(.badSpec, "spec expects build \(b), this harness is \(HarnessBuild.id)")
            }
            let tablePath = try tuningPath ?? spec.tuningTable.map { try resolve("tuning_table", $0) }
            let table = try tablePath.map { try TuningTable.load(path: $0, for: spec.engine) }
            let tuning = TuningTable.merged(table: table, spec: spec.tuning)
            base.tuning = tuning
            // The engine opens the resolved file; the result says `model` as the spec did.
            var local = spec
            local.model = try resolve("model", spec.model)
            if let expected = spec.modelSha256 {
                let actual = try SHA256.hexDigest(ofFile: local.model)
                if actual.lowercased() != expected.lowercased() {
                    throw HarnessError(.badModel, "model sha256 \(actual) != spec's \(expected)")
                }
            }
            let (engine, cold) = try factory.make(spec: local, tuning: tuning)
            base.engineVersion = engine.version
            base.coldCaches = cold
            base.threads = engine.threads
            return try runner.run(local, on: engine, base: base)
        } catch let error as HarnessError {
            base.error = error
            return base
        } catch {
            base.error = HarnessError(.engineFailure, "\(error)")
            return base
        }
    }
}
