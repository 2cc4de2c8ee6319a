import Foundation
@testable import HarnessCore
@testable import HarnessCPU
@testable import HarnessMetal

/// The committed tiny models (made by `orchestrator.models.make_model`): t1 is GQA 4/2 with an
/// untied head, t2 MHA with a tied head; each as F32, Q8_0 and Q4_0 of the same weights.
enum Fixtures {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/models")

    static func path(_ size: String, _ format: String) -> String {
        root.appendingPathComponent("llama-\(size)-s0/model-\(format).gguf").path
    }

    static let all = ["t1/F32", "t1/Q8_0", "t1/Q4_0", "t2/F32", "t2/Q8_0", "t2/Q4_0"]

    static func path(_ name: String) -> String {
        let p = name.split(separator: "/").map(String.init)
        return path(p[0], p[1])
    }

    static let prompt: [Int32] = PromptMaker.ids(seed: 11, count: 37, vocab: 272).map { Int32($0) }
}

#if !canImport(Metal)
/// An emulated device with the limits a test needs (only where Metal is MetalCPU).
func device(_ configure: (inout MetalCPUDevice.Configuration) -> Void) -> MetalCPUDevice {
    var c = MetalCPUDevice.Configuration()
    configure(&c)
    return MetalCPUDevice(configuration: c)
}
#endif

/// Greedy tokens and the bits of every logit vector (prefill's last, then each decode step).
struct Run: Equatable {
    var tokens: [Int32] = []
    var logits: [[UInt32]] = []
}

func generate(_ e: RawLoopMetal, chunk: Int, prompt: [Int32] = Fixtures.prompt, steps: Int = 12) throws -> Run {
    func bits() -> [UInt32] { (0..<e.vocabSize).map { e.logits[$0].bitPattern } }
    var run = Run()
    e.reset()
    var token = try e.prefill(prompt, chunkWidth: chunk)
    run.tokens.append(token)
    run.logits.append(bits())
    for _ in 1..<steps {
        token = try e.decode(token)
        run.tokens.append(token)
        run.logits.append(bits())
    }
    return run
}

/// The token gate's near-tie rule (orchestrator/analysis/tokengate.py) with the CPU engine as
/// the reference: teacher-force the candidate's tokens through it and measure, at each
/// position, how far the candidate's token is below the reference's best logit, in standard
/// deviations of that row (0 where the candidate took the reference's argmax).
enum TokenGate {
    /// `TIE` in tokengate.py.
    static let sameWeights = 0.05
    static let sameClass = 0.5

    static func margins(of tokens: [Int32], prompt: [Int32], reference e: RawLoopCPU) throws -> [Double] {
        func margin(_ t: Int32) -> Double {
            let row = (0..<e.vocabSize).map { Double(e.logits[$0]) }
            let mean = row.reduce(0, +) / Double(row.count)
            var sd = (row.map { ($0 - mean) * ($0 - mean) }.reduce(0, +) / Double(row.count)).squareRoot()
            if sd == 0 { sd = 1 }
            return (row.max()! - row[Int(t)]) / sd
        }
        e.reset()
        _ = try e.prefill(prompt, chunkWidth: 1)
        var out = [margin(tokens[0])]
        for i in 1..<tokens.count {
            _ = try e.decode(tokens[i - 1])
            out.append(margin(tokens[i]))
        }
        return out
    }
}
