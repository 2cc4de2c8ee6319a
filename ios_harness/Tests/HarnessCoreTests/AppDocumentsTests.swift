import Foundation
import Testing
@testable import HarnessCore

/// A fresh directory standing in for an app data container.
func temporaryContainer() throws -> String {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("container-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url.standardizedFileURL.path
}

@Suite struct AppDocumentsTests {
    let docs = AppDocuments(root: "/c/Documents")

    @Test func relativePathsResolveUnderDocuments() throws {
        #expect(try docs.resolve("specs/t1.json") == "/c/Documents/specs/t1.json")
        #expect(try docs.resolve("./specs//t1.json") == "/c/Documents/specs/t1.json")
        #expect(try docs.resolve("models/llama..q8.gguf") == "/c/Documents/models/llama..q8.gguf")
        #expect(try docs.resolve("t.json") == "/c/Documents/t.json")
    }

    @Test func absolutePathsAreRefused() {
        #expect(throws: AppPathError.absolute("/etc/passwd")) { try docs.resolve("/etc/passwd") }
        #expect(throws: AppPathError.absolute("/c/Documents/specs/t.json")) { try docs.resolve("/c/Documents/specs/t.json") }
    }

    @Test func parentComponentsAreRefused() {
        for path in ["..", "../x.json", "specs/../../x.json", "specs/..", "a/../b.json"] {
            #expect(throws: AppPathError.parentComponent(path), "\(path)") { try docs.resolve(path) }
        }
    }

    @Test func emptyAndNulPathsAreRefused() {
        #expect(throws: AppPathError.empty) { try docs.resolve("") }
        #expect(throws: AppPathError.empty) { try docs.resolve("./") }
        #expect(throws: AppPathError.nulByte("a\0b")) { try docs.resolve("a\0b") }
    }

    @Test func errorsSayWhatWasRefused() {
        #expect("\(AppPathError.absolute("/x"))".contains("absolute"))
        #expect("\(AppPathError.parentComponent("../x"))".contains(".."))
    }

    @Test func containerHoldsDocumentsAndTheLayoutIsMade() throws {
        let container = try temporaryContainer()
        defer { try? FileManager.default.removeItem(atPath: container) }
        let docs = AppDocuments(container: container)
        #expect(docs.root == container + "/Documents")
        #expect(docs.path(.models) == container + "/Documents/models")
        try docs.createLayout()
        try docs.createLayout()  // idempotent: a second launch keeps what is there
        let made = try FileManager.default.contentsOfDirectory(atPath: docs.root).sorted()
        #expect(made == ["models", "probes", "results", "specs", "tuning"])
    }

    @Test func modelsResolveUnderDocumentsAsBadSpecOtherwise() throws {
        #expect(try AppLaunch.resolve("model", "models/t1.gguf", in: docs) == "/c/Documents/models/t1.gguf")
        #expect { try AppLaunch.resolve("model", "/models/t1.gguf", in: docs) } throws: { error in
            (error as? HarnessError)?.kind == .badSpec
        }
        #expect { try AppLaunch.resolve("model", "models/../../t1.gguf", in: docs) } throws: { error in
            (error as? HarnessError)?.kind == .badSpec
        }
    }
}

@Suite struct AppHostTests {
    @Test func containerThenTheAppArgumentsVerbatim() throws {
        let dir = try temporaryContainer()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let host = try AppHost(["--container", dir, "--", "--spec", "specs/t.json", "--container", "x"])
        #expect(host.container == dir)
        #expect(host.arguments == ["--spec", "specs/t.json", "--container", "x"])
        #expect(host.documents.root == dir + "/Documents")
        #expect(try AppHost(["--container=\(dir)"]).arguments == [])
        #expect(try AppHost(["--container", dir, "--"]).arguments == [])
    }

    @Test func badHostCommandLinesAreRefused() throws {
        let dir = try temporaryContainer()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(throws: LaunchProblem.self) { try AppHost([]) }
        #expect(throws: LaunchProblem.self) { try AppHost(["--", "--spec", "s.json"]) }
        #expect(throws: LaunchProblem.self) { try AppHost(["--container", dir, "--spec", "s.json"]) }
        #expect(throws: LaunchProblem.self) { try AppHost(["--container", dir + "/missing", "--"]) }
        #expect(throws: LaunchProblem.self) { try AppHost(["--container"]) }
    }
}

@Suite struct ComputeThreadsTests {
    @Test func performanceCoresWhenKnownElseEveryCPU() {
        #expect(ComputeThreads.choose(performanceCores: 2, active: 6) == 2)
        #expect(ComputeThreads.choose(performanceCores: nil, active: 8) == 8)
        #expect(ComputeThreads.choose(performanceCores: 0, active: 4) == 4)
        #expect(ComputeThreads.choose(performanceCores: 12, active: 8) == 8)
        #expect(ComputeThreads.choose(performanceCores: nil, active: 0) == 1)
    }

    @Test func defaultIsWithinTheActiveCPUs() {
        let n = ComputeThreads.defaultCount()
        #expect(n >= 1 && n <= ProcessInfo.processInfo.activeProcessorCount)
        #if !canImport(Darwin)
        #expect(n == ProcessInfo.processInfo.activeProcessorCount)
        #endif
    }
}
