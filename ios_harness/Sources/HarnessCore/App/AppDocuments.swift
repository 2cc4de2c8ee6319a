import Foundation

/// The app's Documents directory: the only place the controller can put files for the app
/// (house_arrest) and read its results from. Every path the app is given, on its command line
/// or in a spec's `model`, is relative to it; nothing may point outside.
///
/// Layout (made on every launch that has work):
/// - `specs/`: trial specs the controller pushes (`specs/<trial_id>.json`)
/// - `models/`: model files (`models/<name>`; the spec says `"model": "models/<name>"`)
/// - `results/`: trial results (`results/<trial_id>.json`) and the controller's probe outputs
/// - `tuning/`: tuning tables (`--tuning tuning/<name>.json`)
/// - `probes/`: probe outputs when no `--out` is given (`probes/thermal.json`)
public struct AppDocuments: Sendable, Equatable {
    public enum Folder: String, CaseIterable, Sendable {
        case specs, models, results, tuning, probes
    }

    /// Absolute path of Documents, without a trailing slash.
    public let root: String

    public init(root: String) {
        self.root = URL(fileURLWithPath: root).standardizedFileURL.path
    }

    /// Documents inside an app data container (`<container>/Documents`), as on the phone.
    public init(container: String) {
        self.init(root: URL(fileURLWithPath: container).appendingPathComponent("Documents").path)
    }

    public func path(_ folder: Folder) -> String {
        root + "/" + folder.rawValue
    }

    /// Creates Documents and its folders (existing ones are kept as they are).
    public func createLayout() throws {
        for folder in Folder.allCases {
            try FileManager.default.createDirectory(atPath: path(folder), withIntermediateDirectories: true)
        }
    }

    /// The absolute path of `relative` under Documents. Refuses an empty path, an absolute one,
    /// a `..` component and a NUL byte; `.` and empty components are dropped. Symbolic links
    /// inside Documents are not followed here (the app never makes any).
    public func resolve(_ relative: String) throws(AppPathError) -> String {
        guard !relative.isEmpty else { throw .empty }
        guard !relative.contains("\0") else { throw .nulByte(relative) }
        guard !relative.hasPrefix("/") else { throw .absolute(relative) }
        let parts = relative.split(separator: "/", omittingEmptySubsequences: true).filter { $0 != "." }
        guard !parts.contains("..") else { throw .parentComponent(relative) }
        guard !parts.isEmpty else { throw .empty }
        return root + "/" + parts.joined(separator: "/")
    }
}

/// A path the app refuses: it could name something outside Documents.
public enum AppPathError: Error, Equatable, Sendable, CustomStringConvertible {
    case empty
    case absolute(String)
    case parentComponent(String)
    case nulByte(String)

    public var description: String {
        switch self {
        case .empty: return "an empty path names no file under Documents"
        case .absolute(let p): return "'\(p)' is absolute; paths are relative to the app's Documents"
        case .parentComponent(let p): return "'\(p)' has a '..' component; paths stay under Documents"
        case .nulByte(let p): return "'\(p.replacingOccurrences(of: "\0", with: "\\0"))' contains a NUL byte"
        }
    }
}
