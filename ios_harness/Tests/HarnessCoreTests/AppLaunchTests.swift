import Foundation
import Synchronization
import Testing
@testable import HarnessCore

/// A thermal probe set by the test, Low Power Mode included.
struct SetThermal: ThermalProbe {
    var state: ThermalState?
    var lowPower: Bool?
    func current() -> ThermalState? { state }
    func lowPowerMode() -> Bool? { lowPower }
}

/// Builds the counting engine and records the model path it was asked to open.
final class RecordingFactory: EngineFactory, Sendable {
    let opened = Mutex<[String]>([])
    var engineNames: [String] { ["fake"] }
    func make(spec: TrialSpec, tuning: [String: TuningValue]) throws -> (engine: any Engine, coldCaches: [String]) {
        opened.withLock { $0.append(spec.model) }
        guard FileManager.default.fileExists(atPath: spec.model) else {
            throw HarnessError(.modelNotFound, "no model at \(spec.model)")
        }
        return (CountingEngine(), [])
    }
}

/// Lines the launch printed.
final class Lines: @unchecked Sendable {
    private(set) var all: [String] = []
    func emit(_ line: String) { all.append(line) }
}

@Suite struct AppLaunchTests {
    let docs = AppDocuments(root: "/c/Documents")

    func request(_ args: [String]) -> AppLaunch.Request {
        AppLaunch(arguments: args, documents: docs).request
    }

    @Test func specArgumentsResolveUnderDocuments() {
        #expect(request(["--spec", "specs/t1.json"])
            == .trial(spec: "/c/Documents/specs/t1.json", out: "/c/Documents/results/t1.json", tuning: nil))
        #expect(request(["--spec", "specs/t1.json", "--out", "results/r.json", "--tuning", "tuning/a.json"])
            == .trial(spec: "/c/Documents/specs/t1.json", out: "/c/Documents/results/r.json",
                      tuning: "/c/Documents/tuning/a.json"))
    }

    @Test func absoluteAndParentPathsAreRefusedForEveryOption() {
        #expect(request(["--spec", "/var/mobile/t.json"])
            == .refused(.path(option: "spec", .absolute("/var/mobile/t.json"))))
        #expect(request(["--spec", "specs/t.json", "--out", "../r.json"])
            == .refused(.path(option: "out", .parentComponent("../r.json"))))
        #expect(request(["--spec", "specs/t.json", "--tuning", "/tmp/t.json"])
            == .refused(.path(option: "tuning", .absolute("/tmp/t.json"))))
        #expect(request(["--probe", "thermal", "--out", "/tmp/p.json"])
            == .refused(.path(option: "out", .absolute("/tmp/p.json"))))
    }

    @Test func probeArguments() {
        #expect(request(["--probe", "thermal", "--out", "results/probe-000001.json"])
            == .probe(.thermal, out: "/c/Documents/results/probe-000001.json", token: "probe-000001"))
        #expect(request(["--probe", "thermal"]) == .probe(.thermal, out: "/c/Documents/probes/thermal.json", token: "thermal"))
        #expect(AppProbe.token(forOut: "/x/p.txt") == "p.txt")
    }

    @Test func commandLinesTheAppDoesNotKnowAreRefused() {
        for args in [["--probe", "battery"], ["--spec", "s.json", "--probe", "thermal"], ["stray"],
                     ["--spec", "s.json", "--verbose", "1"], ["--spec"], ["--out", "results/x.json"],
                     ["--probe", "thermal", "--tuning", "tuning/t.json"]] {
            guard case .refused(.arguments) = request(args) else {
                Issue.record("\(args) was not refused as arguments: \(request(args))")
                continue
            }
        }
        #expect(request([]) == .idle)
    }

    @Test func aRefusedLaunchSaysWhyExits64AndWritesNothing() throws {
        let container = try temporaryContainer()
        defer { try? FileManager.default.removeItem(atPath: container) }
        let launch = AppLaunch(arguments: ["--spec", "/etc/passwd"], documents: AppDocuments(container: container))
        let lines = Lines()
        let code = launch.run(factory: RecordingFactory(), thermal: SetThermal(), emit: lines.emit)
        #expect(code == AppLaunch.exitBadArguments)
        #expect(lines.all.first?.contains("absolute") == true)
        #expect(!lines.all.contains { $0.hasPrefix("HARNESS_DONE") })
        #expect(!FileManager.default.fileExists(atPath: container + "/Documents"))
    }

    @Test func thermalProbeWritesItsFileAndTheSentinel() throws {
        let container = try temporaryContainer()
        defer { try? FileManager.default.removeItem(atPath: container) }
        let docs = AppDocuments(container: container)
        let launch = AppLaunch(arguments: ["--probe", "thermal", "--out", "results/probe-000007.json"], documents: docs)
        let lines = Lines()
        let code = launch.run(factory: RecordingFactory(), thermal: SetThermal(state: .serious, lowPower: true),
                              clock: StepClock(step: 5), emit: lines.emit)
        let out = docs.root + "/results/probe-000007.json"
        #expect(code == SpecRun.exitOK)
        #expect(lines.all == ["HARNESS_DONE probe-000007 \(out)"])
        let data = try Data(contentsOf: URL(fileURLWithPath: out))
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(object["thermal_state"] as? String == "serious")
        #expect(object["low_power"] as? Bool == true)
        #expect(object["t_ns"] as? Int == 1_005)
        #expect(Set(object.keys) == ["thermal_state", "low_power", "t_ns", "harness_build"])
        let reading = try ProtocolJSON.decoder().decode(AppProbe.ThermalReading.self, from: data)
        #expect(reading.thermalState == .serious && reading.harnessBuild == HarnessBuild.id)
        #expect(!FileManager.default.fileExists(atPath: docs.root + "/results/.probe-000007.json.\(getpid()).tmp"))
    }

    @Test func aProbeWithoutAStateWritesNullsAndExits2() throws {
        let container = try temporaryContainer()
        defer { try? FileManager.default.removeItem(atPath: container) }
        let docs = AppDocuments(container: container)
        let lines = Lines()
        let code = AppLaunch(arguments: ["--probe", "thermal"], documents: docs)
            .run(factory: RecordingFactory(), thermal: NoThermalProbe(), emit: lines.emit)
        #expect(code == SpecRun.exitErrorResult)
        #expect(lines.all == ["HARNESS_DONE thermal \(docs.root)/probes/thermal.json"])
        let text = try String(contentsOfFile: docs.root + "/probes/thermal.json", encoding: .utf8)
        #expect(text.contains("\"thermal_state\":null") && text.contains("\"low_power\":null"))
    }

    /// The spec's relative `model` is opened under Documents, wherever the process runs; the
    /// result keeps the spec's own spelling.
    @Test func theSpecsModelIsOpenedUnderDocuments() throws {
        let container = try temporaryContainer()
        defer { try? FileManager.default.removeItem(atPath: container) }
        let docs = AppDocuments(container: container)
        try docs.createLayout()
        try Data([1]).write(to: URL(fileURLWithPath: docs.root + "/models/m.gguf"))
        let (code, result, opened, lines) = try runTrial(model: "models/m.gguf", in: docs)
        #expect(code == SpecRun.exitOK && result.status == .ok)
        #expect(opened == [docs.root + "/models/m.gguf"])
        #expect(result.model == "models/m.gguf")
        #expect(result.thermal.first?.state == .fair)
        #expect(lines == ["HARNESS_DONE t-1 \(docs.root)/results/t-1.json"])
    }

    @Test func aMissingModelUnderDocumentsIsModelNotFound() throws {
        let container = try temporaryContainer()
        defer { try? FileManager.default.removeItem(atPath: container) }
        let (code, result, _, _) = try runTrial(model: "models/absent.gguf", in: AppDocuments(container: container))
        #expect(code == SpecRun.exitErrorResult && result.error?.kind == .modelNotFound)
    }

    @Test func anAbsoluteOrEscapingModelIsABadSpecResult() throws {
        let container = try temporaryContainer()
        defer { try? FileManager.default.removeItem(atPath: container) }
        for model in ["/etc/hosts", "models/../../outside.gguf"] {
            let (code, result, opened, _) = try runTrial(model: model, in: AppDocuments(container: container))
            #expect(code == SpecRun.exitErrorResult && result.error?.kind == .badSpec, "\(model)")
            #expect(result.model == model && opened.isEmpty)
        }
    }

    @Test func aRelativeTuningTableIsReadUnderDocuments() throws {
        let container = try temporaryContainer()
        defer { try? FileManager.default.removeItem(atPath: container) }
        let docs = AppDocuments(container: container)
        try docs.createLayout()
        try Data([1]).write(to: URL(fileURLWithPath: docs.root + "/models/m.gguf"))
        try #"{"engine": "fake", "params": {"depth": 3}}"#.write(
            toFile: docs.root + "/tuning/fake.json", atomically: true, encoding: .utf8)
        let (code, result, _, _) = try runTrial(model: "models/m.gguf", in: docs, extra: ["--tuning", "tuning/fake.json"])
        #expect(code == SpecRun.exitOK && result.tuning == ["depth": .int(3)])
    }

    /// The spec's `tuning_table` (what prepare deployed) is read under Documents like `--tuning`;
    /// an absolute one is refused; a `--tuning` on the command line wins over it.
    @Test func theSpecsTuningTableIsReadUnderDocuments() throws {
        let container = try temporaryContainer()
        defer { try? FileManager.default.removeItem(atPath: container) }
        let docs = AppDocuments(container: container)
        try docs.createLayout()
        try Data([1]).write(to: URL(fileURLWithPath: docs.root + "/models/m.gguf"))
        for (name, depth) in [("a", 3), ("b", 5)] {
            try #"{"engine": "fake", "params": {"depth": \#(depth)}}"#.write(
                toFile: docs.root + "/tuning/\(name).json", atomically: true, encoding: .utf8)
        }
        let (code, result, _, _) = try runTrial(model: "models/m.gguf", in: docs, tuningTable: "tuning/a.json")
        #expect(code == SpecRun.exitOK && result.tuning == ["depth": .int(3)])
        let (refused, bad, _, _) = try runTrial(model: "models/m.gguf", in: docs,
                                               tuningTable: docs.root + "/tuning/a.json")
        #expect(refused == SpecRun.exitErrorResult && bad.error?.kind == .badSpec)
        #expect(bad.error?.message.hasPrefix("tuning_table:") == true)
        let (wins, both, _, _) = try runTrial(model: "models/m.gguf", in: docs, extra: ["--tuning", "tuning/b.json"],
                                              tuningTable: "tuning/a.json")
        #expect(wins == SpecRun.exitOK && both.tuning == ["depth": .int(5)])
    }

    /// Writes `specs/t-1.json` naming `model`, launches `--spec specs/t-1.json --out results/t-1.json`.
    func runTrial(model: String, in docs: AppDocuments, extra: [String] = [], tuningTable: String? = nil)
        throws -> (Int32, TrialResult, [String], [String])
    {
        try docs.createLayout()
        var spec = TrialSpec(runId: "r", trialId: "t-1", engine: "fake", model: model, promptTokens: 4,
                             decodeTokens: 3, promptIds: [1, 2, 3, 4])
        spec.tuningTable = tuningTable
        try ProtocolJSON.encoder().encode(spec).write(to: URL(fileURLWithPath: docs.root + "/specs/t-1.json"))
        let factory = RecordingFactory()
        let lines = Lines()
        let launch = AppLaunch(arguments: ["--spec", "specs/t-1.json", "--out", "results/t-1.json"] + extra, documents: docs)
        let code = launch.run(factory: factory, thermal: FixedThermal(), emit: lines.emit)
        let data = try Data(contentsOf: URL(fileURLWithPath: docs.root + "/results/t-1.json"))
        let result = try ProtocolJSON.decoder().decode(TrialResult.self, from: data)
        return (code, result, factory.opened.withLock { $0 }, lines.all)
    }
}

@Suite struct AppThermalTests {
    #if canImport(Darwin)
    /// The twin's variables cannot reach an Apple build: the real app has no such input.
    @Test func theEnvironmentIsIgnoredOnApplePlatforms() throws {
        let probe = try Thermal.appProbe(environment: ["HARNESS_THERMAL_STATE": "critical", "HARNESS_LOW_POWER": "x"])
        #expect(probe is ProcessThermalProbe)
    }
    #else
    @Test func theTwinSetsTheStateThroughTheEnvironment() throws {
        let probe = try Thermal.appProbe(environment: ["HARNESS_THERMAL_STATE": "critical", "HARNESS_LOW_POWER": "1"])
        #expect(probe.current() == .critical && probe.lowPowerMode() == true)
        let unset = try Thermal.appProbe(environment: [:])
        #expect(unset.current() == nil && unset.lowPowerMode() == nil)
    }

    @Test func valuesNoDeviceReportsAreRefused() {
        #expect(throws: LaunchProblem.self) { try Thermal.appProbe(environment: ["HARNESS_THERMAL_STATE": "hot"]) }
        #expect(throws: LaunchProblem.self) { try Thermal.appProbe(environment: ["HARNESS_LOW_POWER": "yes"]) }
    }
    #endif
}
