import HarnessCore
import HarnessModel

/// Every weight of a llama model, pointing into the loaded GGUF file.
struct LlamaWeights {
    struct Layer {
        let attnNorm: UnsafePointer<Float>
        var q, k, v, o: WeightMatrix
        let ffnNorm: UnsafePointer<Float>
        var gate, up, down: WeightMatrix
    }

    private(set) var embed: WeightMatrix
    private(set) var layers: [Layer]
    let outputNorm: UnsafePointer<Float>
    /// `output.weight`, or the embedding when the head is tied.
    private(set) var head: WeightMatrix
    let tied: Bool

    /// The checked layout the matrices were made from (byte counts, tied head).
    let layout: LlamaLayout

    init(file: GGUFFile, config c: LlamaConfig) throws {
        let l = try LlamaLayout(file: file, config: c)
        func matrix(_ m: MatrixLayout) -> WeightMatrix { WeightMatrix(m, in: file) }
        func norm(_ t: GGUFTensor) -> UnsafePointer<Float> { file.data(t).assumingMemoryBound(to: Float.self) }
        layout = l
        embed = matrix(l.embed)
        layers = l.layers.map { x in
            Layer(attnNorm: norm(x.attnNorm), q: matrix(x.q), k: matrix(x.k), v: matrix(x.v), o: matrix(x.o),
                  ffnNorm: norm(x.ffnNorm), gate: matrix(x.gate), up: matrix(x.up), down: matrix(x.down))
        }
        outputNorm = norm(l.outputNorm)
        tied = l.tiedHead
        head = tied ? embed : matrix(l.head)
    }

    var layerBytes: Int { layout.layerBytes }
    var bytesPerDecodeToken: Int { layout.bytesPerDecodeToken }
    func bytesPerPrefillToken(chunkWidth m: Int) -> Int { layout.bytesPerPrefillToken(chunkWidth: m) }

    /// Puts every quantized matrix into the kernels' row order, in place, each tensor once
    /// (a tied head is the embedding).
    mutating func repack() {
        embed.repack()
        if tied { head = embed } else { head.repack() }
        layers = layers.map { l in
            var l = l
            l.q.repack(); l.k.repack(); l.v.repack(); l.o.repack()
            l.gate.repack(); l.up.repack(); l.down.repack()
            return l
        }
    }

    var weightTypes: Set<GGMLType> { layout.weightTypes }
}
