import HarnessCore
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

/// A file read whole into page-aligned memory (huge pages where the kernel offers them), so
/// timed decode never page-faults on weights and kernels see stable addresses.
final class AlignedBuffer: @unchecked Sendable {
    let base: UnsafeMutableRawPointer
    let count: Int
    /// Bytes allocated: `count` rounded up to the 2 MiB alignment (a page multiple).
    let capacity: Int

    private init(base: UnsafeMutableRawPointer, count: Int, capacity: Int) {
        self.base = base
        self.count = count
        self.capacity = capacity
    }

    deinit { free(base) }

    /// Reads `path`; with `dropPageCache` first asks the kernel to evict the file's cached pages,
    /// so the read really comes from storage (Linux only; elsewhere it is a no-op).
    static func read(path: String, dropPageCache: Bool) throws -> AlignedBuffer {
        let fd = open(path, O_RDONLY)
        if fd < 0 {
            throw HarnessError(.modelNotFound, "cannot open model \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw HarnessError(.badModel, "cannot stat \(path)") }
        let size = Int(st.st_size)
        guard size > 0 else { throw HarnessError(.badModel, "model file \(path) is empty") }
        #if os(Linux)
        if dropPageCache { _ = posix_fadvise(fd, 0, 0, Int32(POSIX_FADV_DONTNEED)) }
        #endif
        let alignment = 2 << 20
        let capacity = (size + alignment - 1) / alignment * alignment
        var raw: UnsafeMutableRawPointer?
        guard posix_memalign(&raw, alignment, capacity) == 0, let base = raw else {
            throw HarnessError(.outOfMemory, "cannot allocate \(size) bytes for \(path)")
        }
        #if os(Linux)
        _ = madvise(base, size, 14 /* MADV_HUGEPAGE */)
        #endif
        var done = 0
        while done < size {
            let n = Glibc_read(fd, base + done, size - done)
            if n <= 0 {
                free(base)
                throw HarnessError(.badModel, "read of \(path) stopped at \(done) of \(size) bytes")
            }
            done += n
        }
        return AlignedBuffer(base: base, count: size, capacity: capacity)
    }
}

@inline(__always)
private func Glibc_read(_ fd: Int32, _ buf: UnsafeMutableRawPointer, _ n: Int) -> Int {
    #if canImport(Darwin)
    return Darwin.read(fd, buf, n)
    #else
    return Glibc.read(fd, buf, n)
    #endif
}
