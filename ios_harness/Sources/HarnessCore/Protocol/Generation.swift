/// One generation: a prefill of the prompt, then greedy decode.
///
/// All times are nanoseconds on one monotonic clock, measured from the moment the prompt was
/// submitted to the engine (t = 0). Metric definitions (the protocol's, in one place):
/// - TTFT: submit -> first generated token available on the CPU (`ttftNs`).
/// - prefill tok/s: prompt tokens / prefill time.
/// - decode tok/s: (n - 1) / (t_last - t_first) over the generated tokens' timestamps.
/// - effective GB/s: engine-reported bytes read per decode token x decode tok/s.
public struct Generation: Codable, Equatable, Sendable {
    public var prefillNs: Int
    public var ttftNs: Int
    public var tokenIds: [Int]
    public var tokenTimesNs: [Int]

    enum CodingKeys: String, CodingKey, CaseIterable {
        case prefillNs = "prefill_ns"
        case ttftNs = "ttft_ns"
        case tokenIds = "token_ids"
        case tokenTimesNs = "token_times_ns"
    }

    public init(prefillNs: Int, ttftNs: Int, tokenIds: [Int], tokenTimesNs: [Int]) {
        self.prefillNs = prefillNs
        self.ttftNs = ttftNs
        self.tokenIds = tokenIds
        self.tokenTimesNs = tokenTimesNs
    }

    public init(from decoder: Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let c = try decoder.container(keyedBy: CodingKeys.self)
        prefillNs = try c.decode(Int.self, forKey: .prefillNs)
        ttftNs = try c.decode(Int.self, forKey: .ttftNs)
        tokenIds = try c.decode([Int].self, forKey: .tokenIds)
        tokenTimesNs = try c.decode([Int].self, forKey: .tokenTimesNs)
    }

    public func validate() throws {
        try require(prefillNs >= 0, "prefill_ns", "must be >= 0")
        try require(ttftNs >= 0, "ttft_ns", "must be >= 0")
        try require(tokenIds.count == tokenTimesNs.count, "token_ids", "token_ids and token_times_ns differ in length")
        try require(tokenTimesNs.count >= 2, "token_times_ns", "a generation needs at least two tokens to time decode")
        try require(zip(tokenTimesNs, tokenTimesNs.dropFirst()).allSatisfy { $0 <= $1 },
                    "token_times_ns", "token_times_ns is not monotonic")
        try require(tokenTimesNs.last != tokenTimesNs.first, "token_times_ns", "decode took zero time")
    }

    /// (n - 1) / (t_last - t_first) over the generated tokens' timestamps.
    public var decodeTokPerS: Double {
        let t = tokenTimesNs
        guard t.count >= 2, t[t.count - 1] > t[0] else { return 0 }
        return Double(t.count - 1) / (Double(t[t.count - 1] - t[0]) * 1e-9)
    }

    /// Prompt tokens / prefill time.
    public func prefillTokPerS(promptTokens: Int) -> Double? {
        prefillNs > 0 ? Double(promptTokens) / (Double(prefillNs) * 1e-9) : nil
    }
}

public enum ThermalState: String, Codable, Sendable, CaseIterable {
    case nominal, fair, serious, critical
}

public struct ThermalSample: Codable, Equatable, Sendable {
    public var tNs: Int
    public var state: ThermalState

    enum CodingKeys: String, CodingKey, CaseIterable {
        case tNs = "t_ns"
        case state
    }

    public init(tNs: Int, state: ThermalState) {
        self.tNs = tNs
        self.state = state
    }

    public init(from decoder: Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let c = try decoder.container(keyedBy: CodingKeys.self)
        tNs = try c.decode(Int.self, forKey: .tNs)
        state = try c.decode(ThermalState.self, forKey: .state)
    }
}
