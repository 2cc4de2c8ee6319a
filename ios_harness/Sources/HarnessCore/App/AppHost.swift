import Foundation

/// `harness app --container DIR -- ARGS...`: the app's logic on a Linux or macOS host, with DIR
/// standing in for the app's data container (Documents = DIR/Documents). ARGS are passed to
/// `AppLaunch` exactly as the app receives its launch arguments; the phone twin launches this
/// with the arguments the controller sent through DVT.
public struct AppHost: Sendable, Equatable {
    public static let usage = "harness app --container DIR [-- APP-ARGS...]"

    /// Absolute path of the container directory.
    public let container: String
    /// The app's launch arguments, verbatim.
    public let arguments: [String]

    /// Parses what follows `app`. `--container DIR` (or `--container=DIR`) comes first and must
    /// name an existing directory; `--` then ends the host's options: everything after it is the
    /// app's, even words that look like host options.
    public init(_ argv: [String]) throws(LaunchProblem) {
        var rest = argv[...]
        var container: String?
        while let arg = rest.popFirst() {
            if arg == "--" { break }
            if arg == "--container", let value = rest.popFirst() {
                container = value
            } else if arg.hasPrefix("--container=") {
                container = String(arg.dropFirst("--container=".count))
            } else {
                throw .arguments("unexpected argument '\(arg)' before '--' (\(Self.usage))")
            }
        }
        guard let dir = container, !dir.isEmpty else { throw .arguments("missing --container DIR (\(Self.usage))") }
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dir, isDirectory: &isDir), isDir.boolValue else {
            throw .arguments("--container \(dir) is not a directory")
        }
        self.container = URL(fileURLWithPath: dir).standardizedFileURL.path
        self.arguments = Array(rest)
    }

    public var documents: AppDocuments { AppDocuments(container: container) }
}
