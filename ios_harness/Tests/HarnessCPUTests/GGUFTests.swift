import Foundation
import Testing
@testable import HarnessCore
@testable import HarnessCPU
@testable import HarnessModel

@Suite struct GGUFTests {
    @Test func readsTheFixtureHeader() throws {
        let f = try GGUFFile(path: ModelFixtures.path("t1", "Q8_0"))
        #expect(f.metadata["general.architecture"]?.asString == "llama")
        #expect(f.tensors["blk.0.attn_q.weight"]?.type == .q8_0)
        #expect(f.tensors["blk.0.attn_k.weight"]?.dims == [64, 32])
        #expect(f.tensors["blk.0.attn_norm.weight"]?.type == .f32)
        let c = try LlamaConfig(file: f)
        #expect(c.dim == 64 && c.layers == 2 && c.heads == 4 && c.kvHeads == 2 && c.hidden == 96 && c.vocab == 288)
    }

    @Test func missingFileIsModelNotFound() {
        #expect(throws: HarnessError.self) {
            do { _ = try GGUFFile(path: "/nonexistent/model.gguf") } catch let e as HarnessError {
                #expect(e.kind == .modelNotFound)
                throw e
            }
        }
    }

    @Test(arguments: [16, 200, 5_000, 60_000])
    func truncatedFileIsBadModel(_ keep: Int) throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: ModelFixtures.path("t1", "Q4_0"))).prefix(keep)
        let path = try ModelFixtures.temporaryFile("trunc.gguf", Data(data))
        do {
            _ = try RawLoopCPU(modelPath: path, threads: 1)
            Issue.record("truncated file at \(keep) bytes loaded")
        } catch let e as HarnessError {
            #expect(e.kind == .badModel, "\(e)")
        }
    }

    @Test func badMagicIsBadModel() throws {
        let path = try ModelFixtures.temporaryFile("magic.gguf", Data("GGML and then some bytes".utf8))
        #expect(throws: HarnessError(.badModel, "\(path) is not a GGUF file (bad magic)")) {
            _ = try GGUFFile(path: path)
        }
    }
}
