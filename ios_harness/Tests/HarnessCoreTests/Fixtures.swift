import Foundation

/// Paths of the fixtures shared with pytest (`Tests/Fixtures`), found from this source file so
/// tests run from any working directory.
enum Fixtures {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures")

    static func protocolFiles(_ group: String, prefix: String) -> [URL] {
        let dir = root.appendingPathComponent("protocol").appendingPathComponent(group)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
        return names.filter { $0.hasPrefix(prefix) && $0.hasSuffix(".json") }.sorted().map { dir.appendingPathComponent($0) }
    }
}
