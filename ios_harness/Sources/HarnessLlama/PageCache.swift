#if canImport(Glibc)
import Glibc
#endif

/// Drops a file's pages from the OS page cache so the next read comes from storage (Linux,
/// `posix_fadvise(DONTNEED)`, as the raw loops do); elsewhere nothing to do and nothing done.
enum PageCache {
    static func drop(_ path: String) {
        #if os(Linux)
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return }
        _ = posix_fadvise(fd, 0, 0, Int32(POSIX_FADV_DONTNEED))
        close(fd)
        #endif
    }
}
