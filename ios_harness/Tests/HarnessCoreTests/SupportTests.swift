import Foundation
import Testing
@testable import HarnessCore

@Suite struct SupportTests {
    @Test func argsParseOptionsAndRejectStrays() throws {
        let a = try Args(["run", "--spec", "s.json", "--out=o.json"])
        #expect(a.command == "run")
        #expect(a.options == ["spec": "s.json", "out": "o.json"])
        #expect(throws: Args.Problem.self) { try Args(["run", "stray"]) }
        #expect(throws: Args.Problem.self) { try Args(["run", "--spec"]) }
        #expect(throws: Args.Problem.self) { try a.only(["spec"]) }
    }

    @Test func sysfsSizesAndCpuLists() {
        #expect(Platform.parseSize("32768K") == 32 << 20)
        #expect(Platform.parseSize("2M") == 2 << 20)
        #expect(Platform.parseSize("512") == 512)
        #expect(Platform.parseSize("x") == nil)
        #expect(Platform.countCpuList("0-3,8") == 5)
        #expect(Platform.countCpuList("1") == 1)
    }

    @Test func cachesReadFromASysfsTree() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("cache-\(UUID().uuidString)")
        for (i, (level, type, size)) in [(1, "Data", "48K"), (2, "Unified", "2048K"), (3, "Unified", "491520K")].enumerated() {
            let dir = root.appendingPathComponent("index\(i)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            try "\(level)\n".write(to: dir.appendingPathComponent("level"), atomically: true, encoding: .utf8)
            try "\(type)\n".write(to: dir.appendingPathComponent("type"), atomically: true, encoding: .utf8)
            try "\(size)\n".write(to: dir.appendingPathComponent("size"), atomically: true, encoding: .utf8)
            try "0-7\n".write(to: dir.appendingPathComponent("shared_cpu_list"), atomically: true, encoding: .utf8)
        }
        let caches = Platform.linuxCaches(root: root.path)
        #expect(caches.count == 3)
        let info = HostInfo(os: "x", arch: "y", cpuModel: "z", logicalCpus: 8, memoryBytes: 1, caches: caches)
        #expect(info.lastLevelCacheBytes == 480 << 20)
        #expect(caches[2].sharedCpus == 8)
        try? FileManager.default.removeItem(at: root)
    }

    @Test func promptMakerIsDeterministic() {
        let a = PromptMaker.ids(seed: 7, count: 50, vocab: 100)
        #expect(a == PromptMaker.ids(seed: 7, count: 50, vocab: 100))
        #expect(a != PromptMaker.ids(seed: 8, count: 50, vocab: 100))
        #expect(a.allSatisfy { (0..<100).contains($0) })
    }

    /// The same ids the Python side computes (`Tests/Fixtures/protocol/prompt_ids.json`).
    @Test func promptMakerMatchesTheSharedVectors() throws {
        struct Case: Decodable { let seed: Int; let count: Int; let vocab: Int; let ids: [Int] }
        struct File: Decodable { let cases: [Case] }
        let url = Fixtures.root.appendingPathComponent("protocol/prompt_ids.json")
        let file = try JSONDecoder().decode(File.self, from: Data(contentsOf: url))
        #expect(file.cases.count >= 3)
        for c in file.cases {
            #expect(PromptMaker.ids(seed: c.seed, count: c.count, vocab: c.vocab) == c.ids, "seed \(c.seed)")
        }
    }

    @Test func sha256KnownVectors() throws {
        func hex(_ s: String) -> String {
            var h = SHA256()
            Array(s.utf8).withUnsafeBytes { h.update($0) }
            return h.finish().map { String(format: "%02x", $0) }.joined()
        }
        #expect(hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(hex(String(repeating: "a", count: 1000)) == "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3")
    }

    @Test func atomicWriteReplacesWhole() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("atomic-\(UUID().uuidString)/r.json").path
        try AtomicFile.write(Data("one".utf8), to: path)
        try AtomicFile.write(Data("two".utf8), to: path)
        #expect(FileManager.default.contents(atPath: path) == Data("two".utf8))
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: (path as NSString).deletingLastPathComponent)
        #expect(leftovers == ["r.json"])
    }
}
