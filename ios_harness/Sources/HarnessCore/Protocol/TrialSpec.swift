/// The protocol version this harness reads and writes.
///
/// History (mirrors `orchestrator/protocol.py`):
/// - 1: first version.
public let protocolSchemaVersion = 1

/// One fresh launch of one engine: everything the harness needs, nothing it must guess.
/// Mirrors `TrialSpec` in `orchestrator/protocol.py` field for field.
public struct TrialSpec: Codable, Equatable, Sendable {
    public var schemaVersion: Int = protocolSchemaVersion
    public var runId: String
    public var trialId: String
    public var engine: String
    /// Model path (or name) as the device sees it.
    public var model: String
    public var modelSha256: String?
    public var promptTokens: Int
    /// Explicit prompt; else made from `seed` (see `PromptMaker`).
    public var promptIds: [Int]?
    public var decodeTokens: Int
    /// Prefill chunk width M (1 = sequential).
    public var chunkWidth: Int = 1
    public var warmRepetitions: Int = 0
    public var seed: Int = 0
    public var threads: Int?
    /// Harness/engine build the plan expects.
    public var build: String?
    public var tuning: [String: TuningValue] = [:]
    /// A tuning table file as the device sees it (what `--tuning` names); `tuning` overrides its params.
    public var tuningTable: String?
    public var clearCaches: [String] = []

    enum CodingKeys: String, CodingKey, CaseIterable {
        case schemaVersion = "schema_version"
        case runId = "run_id"
        case trialId = "trial_id"
        case engine, model
        case modelSha256 = "model_sha256"
        case promptTokens = "prompt_tokens"
        case promptIds = "prompt_ids"
        case decodeTokens = "decode_tokens"
        case chunkWidth = "chunk_width"
        case warmRepetitions = "warm_repetitions"
        case seed, threads, build, tuning
        case tuningTable = "tuning_table"
        case clearCaches = "clear_caches"
    }

    public init(
        runId: String, trialId: String, engine: String, model: String, promptTokens: Int,
        decodeTokens: Int, promptIds: [Int]? = nil, chunkWidth: Int = 1, warmRepetitions: Int = 0,
        seed: Int = 0, threads: Int? = nil
    ) {
        self.runId = runId
        self.trialId = trialId
        self.engine = engine
        self.model = model
        self.promptTokens = promptTokens
        self.decodeTokens = decodeTokens
        self.promptIds = promptIds
        self.chunkWidth = chunkWidth
        self.warmRepetitions = warmRepetitions
        self.seed = seed
        self.threads = threads
    }

    public init(from decoder: Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let c = try decoder.container(keyedBy: CodingKeys.self)
        schemaVersion = try c.decodeIfPresent(Int.self, forKey: .schemaVersion) ?? protocolSchemaVersion
        runId = try c.decode(String.self, forKey: .runId)
        trialId = try c.decode(String.self, forKey: .trialId)
        engine = try c.decode(String.self, forKey: .engine)
        model = try c.decode(String.self, forKey: .model)
        modelSha256 = try c.decodeIfPresent(String.self, forKey: .modelSha256)
        promptTokens = try c.decode(Int.self, forKey: .promptTokens)
        promptIds = try c.decodeIfPresent([Int].self, forKey: .promptIds)
        decodeTokens = try c.decode(Int.self, forKey: .decodeTokens)
        chunkWidth = try c.decodeIfPresent(Int.self, forKey: .chunkWidth) ?? 1
        warmRepetitions = try c.decodeIfPresent(Int.self, forKey: .warmRepetitions) ?? 0
        seed = try c.decodeIfPresent(Int.self, forKey: .seed) ?? 0
        threads = try c.decodeIfPresent(Int.self, forKey: .threads)
        build = try c.decodeIfPresent(String.self, forKey: .build)
        tuning = try c.decodeIfPresent([String: TuningValue].self, forKey: .tuning) ?? [:]
        tuningTable = try c.decodeIfPresent(String.self, forKey: .tuningTable)
        clearCaches = try c.decodeIfPresent([String].self, forKey: .clearCaches) ?? []
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(schemaVersion, forKey: .schemaVersion)
        try c.encode(runId, forKey: .runId)
        try c.encode(trialId, forKey: .trialId)
        try c.encode(engine, forKey: .engine)
        try c.encode(model, forKey: .model)
        try c.encode(modelSha256, forKey: .modelSha256)
        try c.encode(promptTokens, forKey: .promptTokens)
        try c.encode(promptIds, forKey: .promptIds)
        try c.encode(decodeTokens, forKey: .decodeTokens)
        try c.encode(chunkWidth, forKey: .chunkWidth)
        try c.encode(warmRepetitions, forKey: .warmRepetitions)
        try c.encode(seed, forKey: .seed)
        try c.encode(threads, forKey: .threads)
        try c.encode(build, forKey: .build)
        try c.encode(tuning, forKey: .tuning)
        try c.encode(tuningTable, forKey: .tuningTable)
        try c.encode(clearCaches, forKey: .clearCaches)
    }

    /// The rules the Python model enforces beyond JSON types. The schema version is checked
    /// separately (`SpecLoader`) because it maps to its own error kind.
    public func validate() throws {
        try require(promptTokens >= 1, "prompt_tokens", "must be >= 1")
        try require(decodeTokens >= 2, "decode_tokens", "must be >= 2")
        try require(chunkWidth >= 1, "chunk_width", "must be >= 1")
        try require(warmRepetitions >= 0, "warm_repetitions", "must be >= 0")
        if let t = threads { try require(t >= 1, "threads", "must be >= 1") }
        if let ids = promptIds {
            try require(ids.count == promptTokens, "prompt_ids", "must have prompt_tokens entries")
        }
    }
}
