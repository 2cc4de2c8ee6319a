import Foundation
import Synchronization
import Testing
@testable import HarnessCore

/// A clock that advances a fixed step on every read: timing logic tested without waiting.
final class StepClock: MonotonicClock {
    let now = Atomic<UInt64>(1_000)
    let step: UInt64
    init(step: UInt64) { self.step = step }
    func nowNs() -> UInt64 { now.add(step, ordering: .relaxed).newValue }
}

struct FixedThermal: ThermalProbe {
    func current() -> ThermalState? { .fair }
}

/// Reports one state change on its second drain (the runner discards the first, pre-trial one).
final class ChangingThermal: ThermalProbe, @unchecked Sendable {
    var drains = 0
    func current() -> ThermalState? { .nominal }
    func drainChanges() -> [(tNs: UInt64, state: ThermalState)] {
        drains += 1
        return drains == 2 ? [(2_500, .serious)] : []
    }
}

/// An engine that counts: token n+1 follows token n.
final class CountingEngine: Engine {
    let name = "fake"
    let version = "fake 1"
    let contextLength: Int
    let vocabSize = 1000
    let threads: Int? = 1
    let bytesPerDecodeToken = 4096
    var position = 0
    var failAt: Int?
    init(context: Int = 64) { contextLength = context }
    func bytesPerPrefillToken(chunkWidth: Int) -> Int { 4096 / chunkWidth }
    func reset() { position = 0 }
    func prefill(_ tokens: [Int32], chunkWidth: Int) throws -> Int32 {
        position += tokens.count
        return tokens.last! + 1
    }
    func decode(_ token: Int32) throws -> Int32 {
        position += 1
        if position == failAt { throw HarnessError(.engineFailure, "boom") }
        return token + 1
    }
}

struct FakeFactory: EngineFactory {
    var engine: CountingEngine
    var engineNames: [String] { ["fake"] }
    func make(spec: TrialSpec, tuning: [String: TuningValue]) throws -> (engine: any Engine, coldCaches: [String]) {
        if tuning["bad"] != nil { throw HarnessError(.badTuning, "fake has no parameter bad") }
        return (engine, spec.clearCaches)
    }
}

@Suite struct TrialRunnerTests {
    func spec(prompt: Int = 4, decode: Int = 5, warm: Int = 0) -> TrialSpec {
        TrialSpec(runId: "r", trialId: "t", engine: "fake", model: "m", promptTokens: prompt, decodeTokens: decode,
                  promptIds: Array(10..<(10 + prompt)), warmRepetitions: warm)
    }

    func base() -> TrialResult {
        TrialResult(runId: "r", trialId: "t", status: .error, engine: "fake", engineVersion: "fake 1",
                    harnessBuild: "b", model: "m", promptTokens: 4, chunkWidth: 1)
    }

    @Test func timestampsFollowTheClock() throws {
        let runner = TrialRunner(clock: StepClock(step: 1_000), thermal: FixedThermal())
        let r = try runner.run(spec(warm: 2), on: CountingEngine(), base: base())
        let g = try #require(r.trial1)
        #expect(g.tokenIds == [14, 15, 16, 17, 18])
        #expect(g.prefillNs == 1_000 && g.ttftNs == 1_000)
        #expect(g.tokenTimesNs == [1_000, 2_000, 3_000, 4_000, 5_000])
        #expect(abs(g.decodeTokPerS - 1e6) < 1e-3)
        #expect(r.warm.count == 2 && r.warm.allSatisfy { $0.tokenIds == g.tokenIds })
        #expect(r.thermal.count == 4 && r.thermal.allSatisfy { $0.state == .fair })
        #expect(r.status == .ok && r.bytesPerDecodeToken == 4096)
        try r.validate()
    }

    @Test func thermalChangesBetweenBoundariesAreRecorded() throws {
        let runner = TrialRunner(clock: StepClock(step: 1_000), thermal: ChangingThermal())
        let r = try runner.run(spec(), on: CountingEngine(), base: base())
        #expect(r.thermal.first == ThermalSample(tNs: 500, state: .serious))
        #expect(r.thermal.dropFirst().allSatisfy { $0.state == .nominal } && r.thermal.count == 3)
    }

    @Test func contextOverflowIsTypedBeforeAnyWork() {
        let runner = TrialRunner(clock: StepClock(step: 1))
        #expect(throws: HarnessError(.contextOverflow, "prompt_tokens + decode_tokens - 1 = 68 exceeds the context of 64")) {
            _ = try runner.run(spec(prompt: 4, decode: 65), on: CountingEngine(), base: base())
        }
    }

    @Test func promptIdsOutsideTheVocabularyAreRefused() {
        var s = spec()
        s.promptIds = [1, 2, 3, 5000]
        #expect(throws: HarnessError.self) { _ = try TrialRunner().run(s, on: CountingEngine(), base: base()) }
    }

    func runSpec(_ json: String, factory: FakeFactory = FakeFactory(engine: CountingEngine()), tuning: String? = nil)
        throws -> (Int32, TrialResult, [String]) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("specrun-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let specPath = dir.appendingPathComponent("spec.json").path
        let outPath = dir.appendingPathComponent("out/result.json").path
        try json.write(toFile: specPath, atomically: true, encoding: .utf8)
        var tuningPath: String?
        if let tuning {
            tuningPath = dir.appendingPathComponent("tuning.json").path
            try tuning.write(toFile: tuningPath!, atomically: true, encoding: .utf8)
        }
        var lines: [String] = []
        let code = SpecRun.execute(specPath: specPath, outPath: outPath, tuningPath: tuningPath, factory: factory,
                                   runner: TrialRunner(clock: StepClock(step: 10)), print: { lines.append($0) })
        let result = try ProtocolJSON.decoder().decode(TrialResult.self, from: Data(contentsOf: URL(fileURLWithPath: outPath)))
        #expect(lines == ["HARNESS_DONE \(result.trialId) \(outPath)"])
        return (code, result, lines)
    }

    let good = #"{"run_id": "r", "trial_id": "t9", "engine": "fake", "model": "m", "prompt_tokens": 3, "decode_tokens": 4}"#

    @Test func okRunWritesResultAndSentinel() throws {
        let (code, r, _) = try runSpec(good)
        #expect(code == 0 && r.status == .ok && r.trialId == "t9")
        #expect(r.trial1?.tokenIds.count == 4)
    }

    @Test func unknownSchemaIsAnErrorResult() throws {
        let (code, r, _) = try runSpec(#"{"schema_version": 2, "run_id": "r", "trial_id": "t2"}"#)
        #expect(code == SpecRun.exitErrorResult)
        #expect(r.status == .error && r.error?.kind == .unsupportedSchema && r.trialId == "t2")
    }

    @Test func garbageSpecIsAnErrorResult() throws {
        let (code, r, _) = try runSpec("{not json")
        #expect(code == SpecRun.exitErrorResult && r.error?.kind == .badSpec && r.trialId == "unknown")
    }

    @Test func unknownEngineIsABadSpec() throws {
        let (code, r, _) = try runSpec(good.replacingOccurrences(of: "\"fake\"", with: "\"warp\""))
        #expect(code == SpecRun.exitErrorResult && r.error?.kind == .badSpec)
    }

    @Test func tuningForAnotherEngineIsRefused() throws {
        let (code, r, _) = try runSpec(good, tuning: #"{"engine": "llama.cpp", "params": {"threads": 2}}"#)
        #expect(code == SpecRun.exitErrorResult && r.error?.kind == .badTuning)
    }

    @Test func tuningIsMergedAndRecorded() throws {
        let spec = good.replacingOccurrences(of: "}", with: #", "tuning": {"spin": 2}}"#)
        let (code, r, _) = try runSpec(spec, tuning: #"{"engine": "fake", "params": {"spin": 1, "threads": 2}}"#)
        #expect(code == 0)
        #expect(r.tuning == ["spin": .int(2), "threads": .int(2)])
    }

    @Test func interruptionKeepsTheDataButFailsTheTrial() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("interrupt-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let spec = dir.appendingPathComponent("spec.json").path
        let out = dir.appendingPathComponent("result.json").path
        try good.write(toFile: spec, atomically: true, encoding: .utf8)
        let code = SpecRun.execute(specPath: spec, outPath: out, tuningPath: nil, factory: FakeFactory(engine: CountingEngine()),
                                   runner: TrialRunner(clock: StepClock(step: 10)), interrupted: { "resigned active" }, print: { _ in })
        let r = try ProtocolJSON.decoder().decode(TrialResult.self, from: Data(contentsOf: URL(fileURLWithPath: out)))
        #expect(code == SpecRun.exitErrorResult)
        #expect(r.error == HarnessError(.interrupted, "resigned active") && r.trial1 != nil)
    }

    @Test func engineFailureMidRunIsAnErrorResult() throws {
        let engine = CountingEngine()
        engine.failAt = 5
        let (code, r, _) = try runSpec(good, factory: FakeFactory(engine: engine))
        #expect(code == SpecRun.exitErrorResult && r.error == HarnessError(.engineFailure, "boom"))
    }
}
