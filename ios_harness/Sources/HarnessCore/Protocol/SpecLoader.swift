import Foundation

/// Reads a spec file into a `TrialSpec`, or says which typed error it is.
public enum SpecLoader {
    /// The ids a spec carries even when the rest is broken, so an error result can name its trial.
    public struct Identity: Sendable, Equatable {
        public var runId = "unknown"
        public var trialId = "unknown"
        public var engine = "unknown"
        public var model = "unknown"
        public var promptTokens = 0
        public var chunkWidth = 1
    }

    public enum Outcome: Sendable {
        case spec(TrialSpec)
        case failure(HarnessError, Identity)
    }

    public static func load(path: String) -> Outcome {
        guard let data = FileManager.default.contents(atPath: path) else {
            return .failure(HarnessError(.badSpec, "cannot read spec file \(path)"), Identity())
        }
        return parse(data)
    }

    public static func parse(_ data: Data) -> Outcome {
        guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            return .failure(HarnessError(.badSpec, "spec is not a JSON object"), Identity())
        }
        let id = identity(of: object)
        if let version = object["schema_version"] {
            struct Probe: Decodable { let schema_version: Int }
            let probe = try? ProtocolJSON.decoder().decode(Probe.self, from: data)
            if probe?.schema_version != protocolSchemaVersion {
                return .failure(HarnessError(
                    .unsupportedSchema,
                    "schema_version \(version) is not supported (this harness speaks \(protocolSchemaVersion))"), id)
            }
        }
        do {
            let spec = try ProtocolJSON.decoder().decode(TrialSpec.self, from: data)
            try spec.validate()
            return .spec(spec)
        } catch let error as DecodingError {
            return .failure(HarnessError(.badSpec, describe(error)), id)
        } catch {
            return .failure(HarnessError(.badSpec, "\(error)"), id)
        }
    }

    static func identity(of object: [String: Any]) -> Identity {
        var id = Identity()
        if let v = object["run_id"] as? String { id.runId = v }
        if let v = object["trial_id"] as? String { id.trialId = v }
        if let v = object["engine"] as? String { id.engine = v }
        if let v = object["model"] as? String { id.model = v }
        if let v = object["prompt_tokens"] as? Int { id.promptTokens = v }
        if let v = object["chunk_width"] as? Int { id.chunkWidth = v }
        return id
    }

    /// A one-line reason with the JSON path, like the Python side's `parse_result`.
    public static func describe(_ error: DecodingError) -> String {
        func path(_ keys: [CodingKey]) -> String {
            keys.isEmpty ? "<root>" : keys.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
        }
        switch error {
        case .keyNotFound(let key, let ctx):
            return "missing field \(path(ctx.codingPath + [key]))"
        case .typeMismatch(_, let ctx), .valueNotFound(_, let ctx):
            return "wrong type at \(path(ctx.codingPath)): \(ctx.debugDescription)"
        case .dataCorrupted(let ctx):
            return "invalid value at \(path(ctx.codingPath)): \(ctx.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }
}

