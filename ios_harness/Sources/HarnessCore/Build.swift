/// Identifies this harness binary in every result and in `harness info`.
public enum HarnessBuild {
    public static let version = "0.1.0"

    /// `0.1.0-release` or `0.1.0-debug`: a debug build must never pass for a benchmark build.
    public static var id: String {
        #if DEBUG
        return "\(version)-debug"
        #else
        return "\(version)-release"
        #endif
    }
}
