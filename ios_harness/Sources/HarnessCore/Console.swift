#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

/// Writes whole lines straight to file descriptor 1: no stdio buffer can hold the sentinel back
/// (an app launched through DVT has a block-buffered stdout).
public enum Console {
    public static func line(_ text: String) {
        var bytes = Array((text + "\n").utf8)
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeMutableBytes { write(1, $0.baseAddress! + done, $0.count - done) }
            if n <= 0 { return }
            done += n
        }
    }
}
