import Foundation

/// The tiny GGUF models committed under `Tests/Fixtures/models` (made by
/// `orchestrator.models.make_model`; pytest checks they still match the maker).
enum ModelFixtures {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/models")

    /// t1: GQA 4/2 heads, untied head. t2: MHA, tied head.
    static func path(_ size: String, _ format: String) -> String {
        root.appendingPathComponent("llama-\(size)-s0/model-\(format).gguf").path
    }

    static let all: [(String, String)] = [("t1", "Q8_0"), ("t1", "Q4_0"), ("t2", "Q8_0"), ("t2", "Q4_0")]

    static func temporaryFile(_ name: String, _ data: Data) throws -> String {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(UUID().uuidString)-\(name)")
        try data.write(to: url)
        return url.path
    }
}
