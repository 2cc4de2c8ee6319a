/// The dispatches of one forward: argument structs mirror the MSL ones in `MetalShaders`
/// (MetalCPU checks each `constant` argument's size against its struct when the tests run).
extension RawLoopMetal {
    struct MatvecArgs { var rows, cols, columns, inStride, outStride: UInt32 }
    struct NormArgs { var dim: UInt32; var eps: Float; var inStride, outStride: UInt32 }
    struct RopeArgs { var heads, headDim, stride, p0: UInt32; var base: Float }
    struct AttnArgs { var heads, kvHeads, headDim, dim, kvDim, p0, ctx: UInt32 }
    struct CopyArgs { var count, srcOffset, dstOffset: UInt32 }

    func matvec(
        _ enc: any MTLComputeCommandEncoder, _ name: String, _ x: any MTLBuffer, _ inStride: Int,
        _ out: any MTLBuffer, _ outStride: Int, rows: Int, cols: Int, _ m: Int
    ) {
        let t = tensors[name]!
        let kernel = t.type == .q8_0 ? "matvec_q8_0" : t.type == .q4_0 ? "matvec_q4_0" : "matvec_f32"
        var args = MatvecArgs(rows: UInt32(rows), cols: UInt32(cols), columns: UInt32(m),
                              inStride: UInt32(inStride), outStride: UInt32(outStride))
        enc.setComputePipelineState(pipelines[kernel])
        weights.bind(enc, name, index: 0)
        enc.setBuffer(x, offset: 0, index: 1)
        enc.setBuffer(out, offset: 0, index: 2)
        enc.setBytes(&args, length: MemoryLayout<MatvecArgs>.stride, index: 3)
        let rowsPerGroup = 8
        enc.dispatchThreadgroups(MTLSize(width: (rows + rowsPerGroup - 1) / rowsPerGroup, height: 1, depth: 1),
                                 threadsPerThreadgroup: MTLSize(width: 32 * rowsPerGroup, height: 1, depth: 1))
    }

    func norm(_ enc: any MTLComputeCommandEncoder, _ x: any MTLBuffer, _ weight: String, _ out: any MTLBuffer, _ m: Int) {
        var args = NormArgs(dim: UInt32(config.dim), eps: config.normEps, inStride: UInt32(config.dim), outStride: UInt32(config.dim))
        enc.setComputePipelineState(pipelines["rms_norm"])
        enc.setBuffer(x, offset: 0, index: 0)
        weights.bind(enc, weight, index: 1)
        enc.setBuffer(out, offset: 0, index: 2)
        enc.setBytes(&args, length: MemoryLayout<NormArgs>.stride, index: 3)
        enc.dispatchThreadgroups(MTLSize(width: m, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 32, height: 1, depth: 1))
    }

    func rope(_ enc: any MTLComputeCommandEncoder, _ x: any MTLBuffer, heads: Int, stride: Int, p0: Int, _ m: Int) {
        var args = RopeArgs(heads: UInt32(heads), headDim: UInt32(config.headDim), stride: UInt32(stride),
                            p0: UInt32(p0), base: config.ropeBase)
        enc.setComputePipelineState(pipelines["rope"])
        enc.setBuffer(x, offset: 0, index: 0)
        enc.setBytes(&args, length: MemoryLayout<RopeArgs>.stride, index: 1)
        enc.dispatchThreads(MTLSize(width: heads * config.headDim / 2, height: m, depth: 1),
                            threadsPerThreadgroup: MTLSize(width: 32, height: 1, depth: 1))
    }

    func copy(_ enc: any MTLComputeCommandEncoder, _ src: any MTLBuffer, _ srcOffset: Int,
                      _ dst: any MTLBuffer, _ dstOffset: Int, count: Int) {
        var args = CopyArgs(count: UInt32(count), srcOffset: 0, dstOffset: 0)
        enc.setComputePipelineState(pipelines["copy_floats"])
        enc.setBuffer(src, offset: srcOffset, index: 0)
        enc.setBuffer(dst, offset: dstOffset, index: 1)
        enc.setBytes(&args, length: MemoryLayout<CopyArgs>.stride, index: 2)
        enc.dispatchThreads(MTLSize(width: count, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 64, height: 1, depth: 1))
    }

    func add(_ enc: any MTLComputeCommandEncoder, _ x: any MTLBuffer, _ y: any MTLBuffer, _ n: Int) {
        var count = UInt32(n)
        enc.setComputePipelineState(pipelines["add_into"])
        enc.setBuffer(x, offset: 0, index: 0)
        enc.setBuffer(y, offset: 0, index: 1)
        enc.setBytes(&count, length: 4, index: 2)
        enc.dispatchThreads(MTLSize(width: n, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 64, height: 1, depth: 1))
    }

    func siluMul(_ enc: any MTLComputeCommandEncoder, _ n: Int) {
        var count = UInt32(n)
        enc.setComputePipelineState(pipelines["silu_mul"])
        enc.setBuffer(act.gate, offset: 0, index: 0)
        enc.setBuffer(act.up, offset: 0, index: 1)
        enc.setBuffer(act.hidden, offset: 0, index: 2)
        enc.setBytes(&count, length: 4, index: 3)
        enc.dispatchThreads(MTLSize(width: n, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 64, height: 1, depth: 1))
    }

    func attention(_ enc: any MTLComputeCommandEncoder, layer l: Int, p0: Int, _ m: Int) {
        let c = config
        var args = AttnArgs(heads: UInt32(c.heads), kvHeads: UInt32(c.kvHeads), headDim: UInt32(c.headDim),
                            dim: UInt32(c.dim), kvDim: UInt32(c.kvDim), p0: UInt32(p0), ctx: UInt32(c.contextLength))
        enc.setComputePipelineState(pipelines["attention"])
        enc.setBuffer(act.q, offset: 0, index: 0)
        enc.setBuffer(keys[l], offset: 0, index: 1)
        enc.setBuffer(values[l], offset: 0, index: 2)
        enc.setBuffer(act.scores, offset: 0, index: 3)
        enc.setBuffer(act.att, offset: 0, index: 4)
        enc.setBytes(&args, length: MemoryLayout<AttnArgs>.stride, index: 5)
        enc.dispatchThreadgroups(MTLSize(width: c.heads, height: m, depth: 1), threadsPerThreadgroup: MTLSize(width: 32, height: 1, depth: 1))
    }

    /// Final norm of the last column only, then the head (output.weight or the tied embedding).
    func head(_ enc: any MTLComputeCommandEncoder, lastColumn: Int) {
        let c = config
        var args = NormArgs(dim: UInt32(c.dim), eps: c.normEps, inStride: UInt32(c.dim), outStride: UInt32(c.dim))
        enc.setComputePipelineState(pipelines["rms_norm"])
        enc.setBuffer(act.x, offset: lastColumn * c.dim * 4, index: 0)
        weights.bind(enc, "output_norm.weight", index: 1)
        enc.setBuffer(act.xn, offset: 0, index: 2)
        enc.setBytes(&args, length: MemoryLayout<NormArgs>.stride, index: 3)
        enc.dispatchThreadgroups(MTLSize(width: 1, height: 1, depth: 1), threadsPerThreadgroup: MTLSize(width: 32, height: 1, depth: 1))
        let head = tensors["output.weight"] != nil ? "output.weight" : "token_embd.weight"
        matvec(enc, head, act.xn, c.dim, act.logits, c.vocab, rows: c.vocab, cols: c.dim, 1)
    }
}
