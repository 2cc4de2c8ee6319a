import Foundation
import HarnessCore

/// The example of docs/wrapping-a-runtime.md: a whole runtime wrapped as an `Engine`, small enough
/// to read in one sitting. The runtime is a bigram model: its file is the text `bigram 1`, the
/// vocabulary size, then one line per token id with the id greedy decoding picks after it. It is a
/// real (if tiny) language model, so everything below is what a real wrapper does: load the file
/// with typed errors, keep the position, return greedy tokens, count what it reads.
final class BigramEngine: Engine {
    static let engineName = "bigram"
    static let tuningKeys: Set<String> = ["context"]

    // The identity every result carries.
    let name = BigramEngine.engineName
    let version = "bigram 1 (example)"
    let threads: Int? = 1
    let contextLength: Int
    var vocabSize: Int { next.count }
    /// One table entry (an Int32) is read per token: that is this runtime's "weights per token".
    let bytesPerDecodeToken = MemoryLayout<Int32>.size
    func bytesPerPrefillToken(chunkWidth: Int) -> Int { MemoryLayout<Int32>.size }

    private let next: [Int32]
    private var position = 0

    init(path: String, context: Int) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw HarnessError(.modelNotFound, "cannot open model \(path)")
        }
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
        guard lines.first == "bigram 1", lines.count >= 2, let vocab = Int(lines[1]), vocab > 0 else {
            throw HarnessError(.badModel, "\(path): not a bigram 1 file (line 1 must be `bigram 1`, line 2 the vocabulary)")
        }
        guard lines.count == 2 + vocab else {
            throw HarnessError(.badModel, "\(path): \(lines.count - 2) table lines for a vocabulary of \(vocab)")
        }
        var table: [Int32] = []
        for (i, line) in lines.dropFirst(2).enumerated() {
            guard let id = Int32(line), id >= 0, Int(id) < vocab else {
                throw HarnessError(.badModel, "\(path) line \(i + 3): '\(line)' is not a token id below \(vocab)")
            }
            table.append(id)
        }
        next = table
        contextLength = context
    }

    func reset() { position = 0 }

    func prefill(_ tokens: [Int32], chunkWidth: Int) throws -> Int32 {
        try advance(tokens.count)
        return next[Int(tokens.last!)]
    }

    func decode(_ token: Int32) throws -> Int32 {
        try advance(1)
        guard token >= 0, Int(token) < next.count else {
            throw HarnessError(.badSpec, "token \(token) is outside the vocabulary (0..<\(next.count))")
        }
        return next[Int(token)]
    }

    /// The runtime's own limit, checked again here although the runner checks the spec first.
    private func advance(_ n: Int) throws {
        guard position + n <= contextLength else {
            throw HarnessError(.contextOverflow, "position \(position + n) exceeds the context of \(contextLength)")
        }
        position += n
    }
}

extension BigramEngine {
    /// The factory side: tuning keys checked (`bad_tuning`), caches it cannot clear refused
    /// (`bad_spec`), the spec's positions honoured; returns the caches really started cold (none:
    /// this runtime keeps nothing on disk).
    static func make(spec: TrialSpec, tuning: [String: TuningValue]) throws -> (engine: any Engine, coldCaches: [String]) {
        if let bad = tuning.keys.sorted().first(where: { !tuningKeys.contains($0) }) {
            throw HarnessError(.badTuning, "bigram has no tuning parameter '\(bad)'")
        }
        if let cache = spec.clearCaches.first {
            throw HarnessError(.badSpec, "bigram keeps no cache to clear ('\(cache)')")
        }
        var context = spec.promptTokens + spec.decodeTokens
        if let t = tuning["context"] {
            guard let v = t.intValue, v >= 1 else { throw HarnessError(.badTuning, "context must be an integer >= 1") }
            context = v
        }
        return (try BigramEngine(path: spec.model, context: context), [])
    }
}

/// What an app (or `harness`) registers: the names it can build and how.
struct ExampleEngines: EngineFactory {
    var engineNames: [String] { [BigramEngine.engineName] }
    func make(spec: TrialSpec, tuning: [String: TuningValue]) throws -> (engine: any Engine, coldCaches: [String]) {
        switch spec.engine {
        case BigramEngine.engineName: return try BigramEngine.make(spec: spec, tuning: tuning)
        default: throw HarnessError(.badSpec, "engine '\(spec.engine)' is not in this build")
        }
    }
}
