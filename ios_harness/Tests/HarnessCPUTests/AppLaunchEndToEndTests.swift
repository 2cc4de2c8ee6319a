import Foundation
import Testing
import HarnessCore
import HarnessCPU

/// The CPU raw loop, as the app and `harness app` build it.
struct CPUFactory: EngineFactory {
    var engineNames: [String] { [RawLoopCPU.engineName] }
    func make(spec: TrialSpec, tuning: [String: TuningValue]) throws -> (engine: any Engine, coldCaches: [String]) {
        try RawLoopCPU.make(spec: spec, tuning: tuning)
    }
}

/// The app's logic on a container directory, as the controller drives a phone: the model pushed
/// to `Documents/models/<name>`, the spec to `Documents/specs/<trial_id>.json` naming
/// `models/<name>`, launched with relative paths; the result lands in `Documents/results/`.
@Suite struct AppLaunchEndToEndTests {
    static let specJSON = """
        {"schema_version": 1, "run_id": "run-a", "trial_id": "t1-app", "engine": "rawloop-cpu",
         "model": "models/t1.gguf", "prompt_tokens": 6, "decode_tokens": 4, "chunk_width": 2, "seed": 3}
        """

    /// A container laid out as the controller leaves it before a launch.
    static func pushedContainer() throws -> String {
        let container = FileManager.default.temporaryDirectory.appendingPathComponent("app-\(UUID().uuidString)").path
        let docs = AppDocuments(container: container)
        try docs.createLayout()
        try FileManager.default.copyItem(atPath: ModelFixtures.path("t1", "Q8_0"), toPath: docs.path(.models) + "/t1.gguf")
        try Data(specJSON.utf8).write(to: URL(fileURLWithPath: docs.path(.specs) + "/t1-app.json"))
        return container
    }

    static let arguments = ["--spec", "specs/t1-app.json", "--out", "results/t1-app.json"]

    @Test func aTrialRunsInTheContainer() throws {
        let container = try Self.pushedContainer()
        defer { try? FileManager.default.removeItem(atPath: container) }
        let docs = AppDocuments(container: container)
        var lines: [String] = []
        let code = AppLaunch(arguments: Self.arguments, documents: docs)
            .run(factory: CPUFactory(), thermal: NoThermalProbe(), emit: { lines.append($0) })
        let out = docs.path(.results) + "/t1-app.json"
        #expect(code == SpecRun.exitOK)
        #expect(lines == ["HARNESS_DONE t1-app \(out)"])
        let result = try ProtocolJSON.decoder().decode(TrialResult.self, from: Data(contentsOf: URL(fileURLWithPath: out)))
        #expect(result.status == .ok && result.model == "models/t1.gguf")
        #expect(result.trial1?.tokenIds.count == 4)
        #expect(result.threads == ComputeThreads.defaultCount())
    }

    /// The built `harness` beside the test bundle (SwiftPM builds it with the tests).
    static let binary: String? = {
        var dirs = [URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()]
        dirs.append(URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent(".build/debug"))
        return dirs.map { $0.appendingPathComponent("harness").path }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }()

    @Test(.enabled(if: binary != nil, "harness is not built"))
    func harnessAppBehavesLikeTheApp() throws {
        let container = try Self.pushedContainer()
        defer { try? FileManager.default.removeItem(atPath: container) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.binary!)
        process.arguments = ["app", "--container", container, "--"] + Self.arguments
        process.currentDirectoryURL = FileManager.default.temporaryDirectory
        var env = ProcessInfo.processInfo.environment
        env["HARNESS_THERMAL_STATE"] = "fair"
        process.environment = env
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let out = AppDocuments(container: container).path(.results) + "/t1-app.json"
        #expect(process.terminationStatus == SpecRun.exitOK)
        #expect(output.split(separator: "\n").last.map(String.init) == "HARNESS_DONE t1-app \(out)")
        let result = try ProtocolJSON.decoder().decode(TrialResult.self, from: Data(contentsOf: URL(fileURLWithPath: out)))
        #expect(result.status == .ok)
        #if !canImport(Darwin)
        #expect(result.thermal.map(\.state) == [.fair, .fair])
        #endif
    }

    /// Launched without work, the app stays on screen until killed: so does `harness app`.
    @Test(.enabled(if: binary != nil, "harness is not built"))
    func harnessAppWithoutWorkStaysUp() throws {
        let container = FileManager.default.temporaryDirectory.appendingPathComponent("idle-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: container, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: container) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.binary!)
        process.arguments = ["app", "--container", container]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let first = String(decoding: pipe.fileHandleForReading.availableData, as: UTF8.self)
        #expect(first.contains("idle"))
        #expect(process.isRunning)
        // SIGKILL, as DVT's kill sends: the child inherits the test runner's signal mask, in
        // which SIGTERM may be blocked.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
