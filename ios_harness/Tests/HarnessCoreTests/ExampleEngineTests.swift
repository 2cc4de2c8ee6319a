import Foundation
import Testing
@testable import HarnessCore

/// The example engine of docs/wrapping-a-runtime.md, run the way the iOS app runs an engine:
/// `AppLaunch` on a container's Documents, spec in, result file and sentinel out.
@Suite struct ExampleEngineTests {
    /// A container with a bigram model (0 -> 2 -> 4 -> 1 -> 3 -> 0 over a vocabulary of 5) and a spec.
    /// `spec`: fields to set or override, each a JSON literal.
    func container(model: String = "bigram 1\n5\n2\n3\n4\n0\n1\n", spec: [String: String]) throws -> (AppDocuments, URL) {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("example-\(UUID().uuidString)")
        let docs = AppDocuments(root: root.appendingPathComponent("Documents").path)
        try docs.createLayout()
        try Data(model.utf8).write(to: root.appendingPathComponent("Documents/models/m.bigram"))
        var s = ["schema_version": "1", "run_id": "\"run-x\"", "trial_id": "\"t1\"", "engine": "\"bigram\"",
                 "model": "\"models/m.bigram\"", "prompt_tokens": "3", "prompt_ids": "[4, 0, 2]",
                 "decode_tokens": "6", "chunk_width": "2"]
        s.merge(spec) { $1 }
        let json = "{" + s.map { "\"\($0.key)\": \($0.value)" }.joined(separator: ", ") + "}"
        try Data(json.utf8).write(to: root.appendingPathComponent("Documents/specs/t1.json"))
        return (docs, root)
    }

    func launch(_ docs: AppDocuments) throws -> (code: Int32, lines: [String], result: TrialResult) {
        var lines: [String] = []
        let code = AppLaunch(arguments: ["--spec", "specs/t1.json"], documents: docs)
            .run(factory: ExampleEngines(), thermal: NoThermalProbe(), emit: { lines.append($0) })
        let url = URL(fileURLWithPath: docs.root).appendingPathComponent("results/t1.json")
        let result = try ProtocolJSON.decoder().decode(TrialResult.self, from: Data(contentsOf: url))
        try result.validate()
        return (code, lines, result)
    }

    @Test func theAppRunsTheWrappedRuntime() throws {
        let (docs, root) = try container(spec: ["warm_repetitions": "1"])
        defer { try? FileManager.default.removeItem(at: root) }
        let (code, lines, r) = try launch(docs)
        #expect(code == SpecRun.exitOK && lines.last?.hasPrefix("HARNESS_DONE t1 ") == true, "\(lines)")
        #expect(r.status == .ok && r.engine == "bigram" && r.engineVersion == "bigram 1 (example)")
        // After the prompt's last token (2): 4, 1, 3, 0, 2, 4, stamped in order by the trial runner.
        #expect(r.trial1?.tokenIds == [4, 1, 3, 0, 2, 4])
        #expect(r.warm.first?.tokenIds == r.trial1?.tokenIds, "reset starts over")
        let times = try #require(r.trial1?.tokenTimesNs)
        #expect(zip(times, times.dropFirst()).allSatisfy { $0 <= $1 } && r.trial1?.ttftNs == r.trial1?.prefillNs)
        #expect(r.bytesPerDecodeToken == 4 && r.threads == 1 && r.model == "models/m.bigram")
    }

    static let good = "bigram 1\n5\n2\n3\n4\n0\n1\n"

    @Test(arguments: [
        ("bigram 1\n5\n2\n3\n", HarnessError.Kind.badModel, [String: String]()),
        ("bigram 1\n5\n2\n3\n4\n0\n9\n", .badModel, [:]),
        ("gguf\n", .badModel, [:]),
        (good, .badTuning, ["tuning": "{\"threads\": 2}"]),
        (good, .badSpec, ["clear_caches": "[\"page_cache\"]"]),
        (good, .badSpec, ["prompt_ids": "[4, 0, 7]"]),
        (good, .contextOverflow, ["tuning": "{\"context\": 4}"]),
        (good, .modelNotFound, ["model": "\"models/absent.bigram\""]),
    ])
    func failuresAreTypedResults(_ c: (String, HarnessError.Kind, [String: String])) throws {
        let (docs, root) = try container(model: c.0, spec: c.2)
        defer { try? FileManager.default.removeItem(at: root) }
        let (code, lines, r) = try launch(docs)
        #expect(code == SpecRun.exitErrorResult && lines.last?.hasPrefix("HARNESS_DONE t1 ") == true)
        #expect(r.status == .error && r.error?.kind == c.1, "\(String(describing: r.error))")
    }
}
