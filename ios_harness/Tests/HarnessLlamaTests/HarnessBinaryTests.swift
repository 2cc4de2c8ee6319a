import Foundation
import Testing
import HarnessCore

/// The built `harness` with llama.cpp linked, as orch launches it: `harness info` lists the engine
/// and names the llama.cpp it links; `harness run` of a llamacpp spec writes an ok result.
@Suite struct HarnessBinaryTests {
    static let binary: String? = {
        var dirs = [URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()]
        dirs.append(URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent(".build/debug"))
        return dirs.map { $0.appendingPathComponent("harness").path }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }()

    func launch(_ arguments: [String]) throws -> (code: Int32, output: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: try #require(Self.binary, "no built harness beside the tests"))
        p.arguments = arguments
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = FileHandle.nullDevice
        try p.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        return (p.terminationStatus, output)
    }

    @Test func infoListsLlamaCpp() throws {
        let (code, out) = try launch(["info"])
        #expect(code == 0)
        let info = try #require(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any])
        #expect((info["engines"] as? [String])?.contains("llamacpp") == true, "\(out)")
        let llama = try #require(info["llamacpp"] as? [String: Any], "\(out)")
        #expect(llama["commit"] is String && llama["ggml_version"] is String && llama["system_info"] is String)
    }

    @Test func runWritesAnOkResult() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("harness-llama-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let model = LlamaCppTests.path("t2", "Q8_0")
        let spec = dir.appendingPathComponent("spec.json"), out = dir.appendingPathComponent("result.json")
        try Data("""
            {"schema_version": 1, "run_id": "run-b", "trial_id": "tb", "engine": "llamacpp", "model": "\(model)",
             "prompt_tokens": 9, "decode_tokens": 5, "chunk_width": 3, "seed": 2, "threads": 1}
            """.utf8).write(to: spec)
        let (code, text) = try launch(["run", "--spec", spec.path, "--out", out.path])
        #expect(code == 0 && text.hasSuffix("HARNESS_DONE tb \(out.path)\n"), "\(text)")
        let result = try ProtocolJSON.decoder().decode(TrialResult.self, from: Data(contentsOf: out))
        #expect(result.status == .ok && result.engine == "llamacpp" && result.trial1?.tokenIds.count == 5)
        #expect(result.bytesPerDecodeToken != nil && result.engineVersion.hasPrefix("llamacpp 2 (llama.cpp "))
    }
}
