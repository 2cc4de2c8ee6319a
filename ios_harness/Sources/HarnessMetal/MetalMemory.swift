import HarnessCore
import HarnessModel

/// What the Metal raw loop keeps on the device, sized before anything is allocated and checked
/// against the device's working-set budget (`recommendedMaxWorkingSetSize`): a run that cannot
/// fit is refused with the figures instead of failing partway or being killed.
struct MetalMemoryPlan: Equatable {
    /// The model file's mapped views.
    let weights: Int
    /// Keys and values, f32, for `positions` positions of every layer.
    let kvCache: Int
    /// Activations for chunks of `columns` tokens, the attention scores and the logits.
    let activations: Int
    let positions: Int
    let columns: Int

    var total: Int { weights + kvCache + activations }

    init(config c: LlamaConfig, weights: Int, columns m: Int) {
        self.weights = weights
        positions = c.contextLength
        columns = m
        kvCache = 2 * c.layers * Self.kvLayerBytes(c)
        activations = Self.activationFloats(c, columns: m).reduce(0, +) * 4
    }

    /// One layer's keys (or values): `[position][kv dim]` f32.
    static func kvLayerBytes(_ c: LlamaConfig) -> Int { c.contextLength * c.kvDim * 4 }

    /// Floats of each activation buffer, in `RawLoopMetal.Activations` order:
    /// x, xn, q, k, v, att, gate, up, hidden, tmp, scores, logits.
    static func activationFloats(_ c: LlamaConfig, columns m: Int) -> [Int] {
        [m * c.dim, m * c.dim, m * c.dim, m * c.kvDim, m * c.kvDim, m * c.dim, m * c.hidden, m * c.hidden,
         m * c.hidden, m * c.dim, m * c.heads * c.contextLength, c.vocab]
    }

    /// Throws `out_of_memory` when the plan is over `budget` bytes.
    func check(budget: UInt64, device: String) throws {
        guard UInt64(total) > budget else { return }
        func mb(_ b: Int) -> String { String(b / 1_000_000) }
        throw HarnessError(.outOfMemory,
            "rawloop-metal needs \(mb(total)) MB (model \(mb(weights)) MB, KV cache \(mb(kvCache)) MB for \(positions) positions, "
            + "activations \(mb(activations)) MB for chunks of \(columns)), over the working-set budget of \(device) "
            + "(\(budget / 1_000_000) MB)")
    }
}
