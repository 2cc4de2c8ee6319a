/// A typed failure, written into the result instead of crashing.
public struct HarnessError: Error, Codable, Equatable, Sendable, CustomStringConvertible {
    public enum Kind: String, Codable, Sendable, CaseIterable {
        case badSpec = "bad_spec"
        case unsupportedSchema = "unsupported_schema"
        case modelNotFound = "model_not_found"
        case badModel = "bad_model"
        case contextOverflow = "context_overflow"
        case badTuning = "bad_tuning"
        case engineFailure = "engine_failure"
        case outOfMemory = "out_of_memory"
        case interrupted
    }

    public var kind: Kind
    public var message: String

    enum CodingKeys: String, CodingKey, CaseIterable {
        case kind, message
    }

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public init(from decoder: Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let c = try decoder.container(keyedBy: CodingKeys.self)
        kind = try c.decode(Kind.self, forKey: .kind)
        message = try c.decode(String.self, forKey: .message)
    }

    public var description: String { "\(kind.rawValue): \(message)" }
}
