import Foundation

/// A tuning table for one engine: `{"engine": "rawloop-cpu", "params": {"threads": 2}}`.
/// Optional `device` names what the table was tuned on; it is informational.
public struct TuningTable: Codable, Equatable, Sendable {
    public var engine: String
    public var device: String?
    public var params: [String: TuningValue]

    enum CodingKeys: String, CodingKey, CaseIterable {
        case engine, device, params
    }

    public init(engine: String, device: String? = nil, params: [String: TuningValue]) {
        self.engine = engine
        self.device = device
        self.params = params
    }

    public init(from decoder: Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let c = try decoder.container(keyedBy: CodingKeys.self)
        engine = try c.decode(String.self, forKey: .engine)
        device = try c.decodeIfPresent(String.self, forKey: .device)
        params = try c.decode([String: TuningValue].self, forKey: .params)
    }

    /// Loads a table and checks it is for `engine`.
    public static func load(path: String, for engine: String) throws -> TuningTable {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw HarnessError(.badTuning, "cannot read tuning file \(path)")
        }
        let table: TuningTable
        do {
            table = try ProtocolJSON.decoder().decode(TuningTable.self, from: data)
        } catch let error as DecodingError {
            throw HarnessError(.badTuning, "tuning file: \(SpecLoader.describe(error))")
        } catch {
            throw HarnessError(.badTuning, "tuning file is not JSON")
        }
        if table.engine != engine {
            throw HarnessError(.badTuning, "tuning file is for engine '\(table.engine)', the spec runs '\(engine)'")
        }
        return table
    }

    /// The parameters a trial runs with: the table's, overridden by the spec's own `tuning`.
    public static func merged(table: TuningTable?, spec: [String: TuningValue]) -> [String: TuningValue] {
        (table?.params ?? [:]).merging(spec) { _, specValue in specValue }
    }
}
