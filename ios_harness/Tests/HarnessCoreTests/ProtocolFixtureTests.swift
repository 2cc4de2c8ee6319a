import Foundation
import Testing
@testable import HarnessCore

/// The golden fixtures pytest also reads: valid ones decode, validate and re-encode to the same
/// JSON; invalid ones are refused.
@Suite struct ProtocolFixtureTests {
    static let validSpecs = Fixtures.protocolFiles("valid", prefix: "spec_")
    static let validResults = Fixtures.protocolFiles("valid", prefix: "result_")
    static let invalidSpecs = Fixtures.protocolFiles("invalid", prefix: "spec_")
    static let invalidResults = Fixtures.protocolFiles("invalid", prefix: "result_")

    func sameJSON(_ a: Data, _ b: Data) throws -> Bool {
        let x = try JSONSerialization.jsonObject(with: a) as? NSDictionary
        let y = try JSONSerialization.jsonObject(with: b) as? NSDictionary
        return x != nil && x == y
    }

    @Test func fixturesArePresent() {
        #expect(Self.validSpecs.count >= 2)
        #expect(Self.validResults.count >= 3)
        #expect(Self.invalidSpecs.count >= 8)
        #expect(Self.invalidResults.count >= 8)
    }

    @Test(arguments: validSpecs)
    func validSpecRoundTrips(_ url: URL) throws {
        let data = try Data(contentsOf: url)
        guard case .spec(let spec) = SpecLoader.parse(data) else {
            Issue.record("\(url.lastPathComponent) was refused")
            return
        }
        #expect(try sameJSON(ProtocolJSON.encoder().encode(spec), data), "\(url.lastPathComponent)")
    }

    @Test(arguments: validResults)
    func validResultRoundTrips(_ url: URL) throws {
        let data = try Data(contentsOf: url)
        let result = try ProtocolJSON.decoder().decode(TrialResult.self, from: data)
        try result.validate()
        #expect(try sameJSON(ProtocolJSON.encoder().encode(result), data), "\(url.lastPathComponent)")
    }

    @Test(arguments: invalidSpecs)
    func invalidSpecIsATypedError(_ url: URL) throws {
        let data = try Data(contentsOf: url)
        guard case .failure(let error, _) = SpecLoader.parse(data) else {
            Issue.record("\(url.lastPathComponent) was accepted")
            return
        }
        let expected: HarnessError.Kind = url.lastPathComponent.contains("schema_version") ? .unsupportedSchema : .badSpec
        #expect(error.kind == expected, "\(url.lastPathComponent): \(error)")
    }

    @Test(arguments: invalidResults)
    func invalidResultIsRefused(_ url: URL) throws {
        let data = try Data(contentsOf: url)
        #expect(throws: (any Error).self, "\(url.lastPathComponent)") {
            let r = try ProtocolJSON.decoder().decode(TrialResult.self, from: data)
            try r.validate()
        }
    }

    @Test func specDefaultsMatchThePythonModel() throws {
        let json = #"{"run_id": "r", "trial_id": "t", "engine": "e", "model": "m", "prompt_tokens": 3, "decode_tokens": 2}"#
        guard case .spec(let s) = SpecLoader.parse(Data(json.utf8)) else {
            Issue.record("minimal spec refused")
            return
        }
        #expect(s.schemaVersion == 1)
        #expect(s.chunkWidth == 1 && s.warmRepetitions == 0 && s.seed == 0)
        #expect(s.threads == nil && s.promptIds == nil && s.modelSha256 == nil && s.build == nil)
        #expect(s.tuning.isEmpty && s.clearCaches.isEmpty)
    }

    @Test func tuningValuesKeepTheirTypes() throws {
        let json = #"{"a": 2, "b": 0.5, "c": true, "d": "x"}"#
        let t = try ProtocolJSON.decoder().decode([String: TuningValue].self, from: Data(json.utf8))
        #expect(t == ["a": .int(2), "b": .double(0.5), "c": .bool(true), "d": .string("x")])
    }

    @Test func metricsFollowTheDefinitions() throws {
        let g = Generation(prefillNs: 500_000_000, ttftNs: 500_000_000, tokenIds: [1, 2, 3], tokenTimesNs: [0, 1_000_000_000, 2_000_000_000])
        #expect(g.decodeTokPerS == 1.0)
        #expect(g.prefillTokPerS(promptTokens: 10) == 20.0)
        var r = TrialResult(runId: "r", trialId: "t", status: .ok, engine: "e", engineVersion: "v", harnessBuild: "b",
                            model: "m", promptTokens: 10, chunkWidth: 1)
        r.trial1 = g
        r.bytesPerDecodeToken = 2_000_000_000
        #expect(r.effectiveGBPerS == 2.0)
    }
}
