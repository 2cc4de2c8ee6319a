#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

/// Writes whole lines straight to file descriptors 1 and 2: no stdio buffer can hold the sentinel
/// back (an app launched through DVT has a block-buffered stdout).
public enum Console {
    /// Line-buffers stdio's stdout too, for anything printed outside `line` (the app does this
    /// first thing, and so does `harness app`).
    public static func lineBufferStdout() {
        Platform.lineBufferStdout()
    }

    /// One line on stdout.
    public static func line(_ text: String) {
        put(text, fd: 1)
    }

    /// One line on stderr (diagnostics of `harness run`; the app has only stdout as a console).
    public static func errorLine(_ text: String) {
        put(text, fd: 2)
    }

    private static func put(_ text: String, fd: Int32) {
        var bytes = Array((text + "\n").utf8)
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeMutableBytes { write(fd, $0.baseAddress! + done, $0.count - done) }
            if n <= 0 { return }
            done += n
        }
    }
}
