/// What the harness writes (atomically) for one `TrialSpec`.
/// Mirrors `TrialResult` in `orchestrator/protocol.py` field for field.
public struct TrialResult: Codable, Equatable, Sendable {
    public enum Status: String, Codable, Sendable {
        case ok, error
    }

    public var schemaVersion: Int = protocolSchemaVersion
    public var runId: String
    public var trialId: String
    public var status: Status
    public var error: HarnessError?
    public var engine: String
    public var engineVersion: String
    public var harnessBuild: String
    public var model: String
    public var promptTokens: Int
    public var chunkWidth: Int
    public var threads: Int?
    public var trial1: Generation?
    public var warm: [Generation] = []
    /// Engine-reported weight bytes read per decode token.
    public var bytesPerDecodeToken: Int?
    public var bytesPerPrefillToken: Int?
    public var thermal: [ThermalSample] = []
    public var coldCaches: [String] = []
    public var tuning: [String: TuningValue] = [:]

    enum CodingKeys: String, CodingKey, CaseIterable {
        case schemaVersion = "schema_version"
        case runId = "run_id"
        case trialId = "trial_id"
        case status, error, engine
        case engineVersion = "engine_version"
        case harnessBuild = "harness_build"
        case model
        case promptTokens = "prompt_tokens"
        case chunkWidth = "chunk_width"
        case threads, trial1, warm
        case bytesPerDecodeToken = "bytes_per_decode_token"
        case bytesPerPrefillToken = "bytes_per_prefill_token"
        case thermal
        case coldCaches = "cold_caches"
        case tuning
    }

    public init(
        runId: String, trialId: String, status: Status, error: HarnessError? = nil, engine: String,
        engineVersion: String, harnessBuild: String, model: String, promptTokens: Int, chunkWidth: Int
    ) {
        self.runId = runId
        self.trialId = trialId
        self.status = status
        self.error = error
        self.engine = engine
        self.engineVersion = engineVersion
        self.harnessBuild = harnessBuild
        self.model = model
        self.promptTokens = promptTokens
        self.chunkWidth = chunkWidth
    }

    public init(from decoder: Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let c = try decoder.container(keyedBy: CodingKeys.self)
        schemaVersion = try c.decodeIfPresent(Int.self, forKey: .schemaVersion) ?? protocolSchemaVersion
        runId = try c.decode(String.self, forKey: .runId)
        trialId = try c.decode(String.self, forKey: .trialId)
        status = try c.decode(Status.self, forKey: .status)
        error = try c.decodeIfPresent(HarnessError.self, forKey: .error)
        engine = try c.decode(String.self, forKey: .engine)
        engineVersion = try c.decode(String.self, forKey: .engineVersion)
        harnessBuild = try c.decode(String.self, forKey: .harnessBuild)
        model = try c.decode(String.self, forKey: .model)
        promptTokens = try c.decode(Int.self, forKey: .promptTokens)
        chunkWidth = try c.decode(Int.self, forKey: .chunkWidth)
        threads = try c.decodeIfPresent(Int.self, forKey: .threads)
        trial1 = try c.decodeIfPresent(Generation.self, forKey: .trial1)
        warm = try c.decodeIfPresent([Generation].self, forKey: .warm) ?? []
        bytesPerDecodeToken = try c.decodeIfPresent(Int.self, forKey: .bytesPerDecodeToken)
        bytesPerPrefillToken = try c.decodeIfPresent(Int.self, forKey: .bytesPerPrefillToken)
        thermal = try c.decodeIfPresent([ThermalSample].self, forKey: .thermal) ?? []
        coldCaches = try c.decodeIfPresent([String].self, forKey: .coldCaches) ?? []
        tuning = try c.decodeIfPresent([String: TuningValue].self, forKey: .tuning) ?? [:]
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(schemaVersion, forKey: .schemaVersion)
        try c.encode(runId, forKey: .runId)
        try c.encode(trialId, forKey: .trialId)
        try c.encode(status, forKey: .status)
        try c.encode(error, forKey: .error)
        try c.encode(engine, forKey: .engine)
        try c.encode(engineVersion, forKey: .engineVersion)
        try c.encode(harnessBuild, forKey: .harnessBuild)
        try c.encode(model, forKey: .model)
        try c.encode(promptTokens, forKey: .promptTokens)
        try c.encode(chunkWidth, forKey: .chunkWidth)
        try c.encode(threads, forKey: .threads)
        try c.encode(trial1, forKey: .trial1)
        try c.encode(warm, forKey: .warm)
        try c.encode(bytesPerDecodeToken, forKey: .bytesPerDecodeToken)
        try c.encode(bytesPerPrefillToken, forKey: .bytesPerPrefillToken)
        try c.encode(thermal, forKey: .thermal)
        try c.encode(coldCaches, forKey: .coldCaches)
        try c.encode(tuning, forKey: .tuning)
    }

    /// The consistency rules of the Python model.
    public func validate() throws {
        try require(schemaVersion == protocolSchemaVersion, "schema_version", "must be \(protocolSchemaVersion)")
        if status == .ok { try require(trial1 != nil, "trial1", "status ok needs trial1") }
        if status == .error { try require(error != nil, "error", "status error needs error") }
        try trial1?.validate()
        for g in warm { try g.validate() }
    }

    public var decodeTokPerS: Double? { trial1?.decodeTokPerS }

    public var prefillTokPerS: Double? { trial1?.prefillTokPerS(promptTokens: promptTokens) }

    /// Engine-reported bytes read per decode token x decode tok/s.
    public var effectiveGBPerS: Double? {
        guard let rate = decodeTokPerS, let bytes = bytesPerDecodeToken else { return nil }
        return Double(bytes) * rate / 1e9
    }
}
