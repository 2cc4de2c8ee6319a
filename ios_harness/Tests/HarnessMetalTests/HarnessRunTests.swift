import Foundation
import Testing
@testable import HarnessCore
@testable import HarnessCPU
@testable import HarnessMetal

/// The built `harness` running the Metal engine, as the orchestrator and the phone twin launch
/// it: `harness run` and `harness app` (the app's logic on a container). Off Apple platforms the
/// engine runs on MetalCPU and the result says so.
@Suite struct HarnessRunTests {
    static let binary: String? = {
        var dirs = [URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()]
        dirs.append(URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent(".build/debug"))
        return dirs.map { $0.appendingPathComponent("harness").path }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }()

    static func spec(model: String, trial: String) -> String {
        """
        {"schema_version": 1, "run_id": "run-m", "trial_id": "\(trial)", "engine": "rawloop-metal",
         "model": "\(model)", "prompt_tokens": 12, "decode_tokens": 6, "chunk_width": 4, "seed": 5,
         "warm_repetitions": 1}
        """
    }

    func launch(_ arguments: [String]) throws -> (code: Int32, output: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.binary!)
        p.arguments = arguments
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        return (p.terminationStatus, output)
    }

    /// The tokens the engine gives in this process for the spec's prompt.
    func expectedTokens() throws -> [Int] {
        let e = try RawLoopMetal(modelPath: Fixtures.path("t1", "Q8_0"), maxPositions: 18)
        let prompt = PromptMaker.ids(seed: 5, count: 12, vocab: e.vocabSize).map { Int32($0) }
        return try generate(e, chunk: 4, prompt: prompt, steps: 6).tokens.map { Int($0) }
    }

    func check(_ resultPath: String) throws -> TrialResult {
        let result = try ProtocolJSON.decoder().decode(TrialResult.self, from: Data(contentsOf: URL(fileURLWithPath: resultPath)))
        try result.validate()
        #expect(result.status == .ok && result.engine == "rawloop-metal", "\(String(describing: result.error))")
        #expect(result.engineVersion.hasSuffix("(emulated Metal on CPU)") == MetalPlatform.emulated, "\(result.engineVersion)")
        #expect(result.trial1?.tokenIds == (try expectedTokens()))
        #expect(result.warm.first?.tokenIds == result.trial1?.tokenIds)
        return result
    }

    @Test(.enabled(if: binary != nil, "harness is not built"))
    func harnessRunRunsTheMetalEngine() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("metal-run-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let spec = dir.appendingPathComponent("spec.json").path, out = dir.appendingPathComponent("result.json").path
        try Data(Self.spec(model: Fixtures.path("t1", "Q8_0"), trial: "m-run").utf8).write(to: URL(fileURLWithPath: spec))
        let (code, output) = try launch(["run", "--spec", spec, "--out", out])
        #expect(code == SpecRun.exitOK)
        #expect(output.split(separator: "\n").last.map(String.init) == "HARNESS_DONE m-run \(out)")
        _ = try check(out)
        let (_, info) = try launch(["info"])
        #expect(info.contains("\"rawloop-metal\""))
        if MetalPlatform.emulated {
            #expect(info.contains("\"emulated\" : true") && info.contains("MetalCPU (emulated Metal on CPU)"), "\(info)")
        }
    }

    @Test(.enabled(if: binary != nil, "harness is not built"))
    func harnessAppRunsTheMetalArm() throws {
        let container = FileManager.default.temporaryDirectory.appendingPathComponent("metal-app-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: container) }
        let docs = AppDocuments(container: container)
        try docs.createLayout()
        try FileManager.default.copyItem(atPath: Fixtures.path("t1", "Q8_0"), toPath: docs.path(.models) + "/t1.gguf")
        try Data(Self.spec(model: "models/t1.gguf", trial: "m-app").utf8)
            .write(to: URL(fileURLWithPath: docs.path(.specs) + "/m-app.json"))
        let (code, output) = try launch(["app", "--container", container, "--", "--spec", "specs/m-app.json"])
        let out = docs.path(.results) + "/m-app.json"
        #expect(code == SpecRun.exitOK)
        #expect(output.split(separator: "\n").last.map(String.init) == "HARNESS_DONE m-app \(out)")
        #expect(try check(out).model == "models/t1.gguf")
    }
}
