import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A Metal device emulated on the CPU: MSL compiled by clang as C++ and run by MetalCPURuntime
/// with Metal's threadgroup and SIMD-group semantics. What it proves and what it cannot is in
/// Tools/MetalCPU/README.md: the engine's logic, layouts and dispatch geometry, never GPU speed,
/// Apple's floating-point order or a phone's real memory limits.
public final class MetalCPUDevice: MTLDevice, @unchecked Sendable {
    /// The limits and behaviour this device reports; tests shrink them to exercise the engine's
    /// checks (a small `maxBufferLength` forces the model into several buffers).
    public struct Configuration: Sendable {
        public var name = "MetalCPU (emulated Metal on CPU)"
        /// iOS devices report 1 GiB on some models: the same by default, so the engine's
        /// splitting runs on every model larger than that.
        public var maxBufferLength = 1 << 30
        /// Defaults to three quarters of the host's memory.
        public var recommendedMaxWorkingSetSize = ProcessInfo.processInfo.physicalMemory / 4 * 3
        /// Apple 7 (A14) and everything below it, as the engine's oldest supported phone.
        public var families: Set<MTLGPUFamily> = [.apple1, .apple2, .apple3, .apple4, .apple5, .apple6, .apple7,
                                                   .common1, .common2, .common3, .metal3]
        /// Host threads that run threadgroups of one dispatch in parallel (`METALCPU_WORKERS`
        /// overrides the default, every active CPU).
        public var workers = ProcessInfo.processInfo.environment["METALCPU_WORKERS"].flatMap { Int($0) }.map { max(1, $0) }
            ?? ProcessInfo.processInfo.activeProcessorCount
        /// Switch fibers with `swapcontext` even where the fast x86-64 switch exists.
        public var portableFibers = false
        /// Stack of each emulated GPU thread.
        public var stackBytes = 128 << 10
        /// The clang that compiles shaders; nil: `METALCPU_CLANG`, else the Swift toolchain's.
        public var clang: String?

        public init() {}
    }

    public let configuration: Configuration
    public var name: String { configuration.name }
    public var maxBufferLength: Int { configuration.maxBufferLength }
    public var recommendedMaxWorkingSetSize: UInt64 { configuration.recommendedMaxWorkingSetSize }
    public var maxThreadsPerThreadgroup: MTLSize { MTLSize(width: 1024, height: 1024, depth: 64) }
    public static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    private let lock = NSLock()
    private var allocated = 0

    /// Bytes of every live buffer this device allocated (no-copy buffers are not counted).
    public var currentAllocatedSize: Int { lock.withLock { allocated } }

    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    nonisolated(unsafe) static let systemDefault: any MTLDevice = MetalCPUDevice()

    public func supportsFamily(_ gpuFamily: MTLGPUFamily) -> Bool { configuration.families.contains(gpuFamily) }

    public func makeCommandQueue() -> (any MTLCommandQueue)? { CPUCommandQueue(device: self) }

    public func makeLibrary(source: String, options: MTLCompileOptions?) throws -> any MTLLibrary {
        var defines: [String] = []
        if supportsFamily(.apple6) || supportsFamily(.mac2) { defines.append("__METALCPU_SIMD_PERMUTE__") }
        if supportsFamily(.apple7) || supportsFamily(.mac2) { defines.append("__METALCPU_SIMD_REDUCTION__") }
        let compiled = try MSLCompiler.compile(source: source, mathMode: options?.mathMode ?? .fast, defines: defines,
                                               clang: configuration.clang)
        return CPULibrary(compiled: compiled)
    }

    public func makeComputePipelineState(function: any MTLFunction) throws -> any MTLComputePipelineState {
        guard let f = function as? CPUFunction else { throw MetalCPUError("a function from another device") }
        return CPUPipelineState(kernel: f.kernel)
    }

    public func makeBuffer(length: Int, options: MTLResourceOptions) -> (any MTLBuffer)? {
        guard length > 0, length <= maxBufferLength, let memory = GuardedMemory(length: length) else { return nil }
        lock.withLock { allocated += length }
        return CPUBuffer(base: memory.base, length: length, isPrivate: options.contains(.storageModePrivate)) { [self] in
            memory.release()
            lock.withLock { allocated -= length }
        }
    }

    public func makeBuffer(bytesNoCopy pointer: UnsafeMutableRawPointer, length: Int, options: MTLResourceOptions,
                           deallocator: ((UnsafeMutableRawPointer, Int) -> Void)?) -> (any MTLBuffer)? {
        // Apple's rules: page-aligned memory, a whole number of pages, within the length limit.
        guard length > 0, length <= maxBufferLength, Int(bitPattern: pointer) % Self.pageSize == 0,
              length % Self.pageSize == 0 else { return nil }
        return CPUBuffer(base: pointer, length: length, isPrivate: options.contains(.storageModePrivate)) {
            deallocator?(pointer, length)
        }
    }
}

/// Why MetalCPU refused or failed: the message says what and where (clang's output included).
public struct MetalCPUError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// A buffer in host memory.
final class CPUBuffer: MTLBuffer, @unchecked Sendable {
    let base: UnsafeMutableRawPointer
    let length: Int
    let isPrivate: Bool
    private let release: () -> Void

    init(base: UnsafeMutableRawPointer, length: Int, isPrivate: Bool, release: @escaping () -> Void) {
        self.base = base
        self.length = length
        self.isPrivate = isPrivate
        self.release = release
    }

    deinit { release() }

    func contents() -> UnsafeMutableRawPointer {
        // On a GPU the CPU cannot see private storage; code that reads it here is wrong there.
        precondition(!isPrivate, "MetalCPU: contents() of a buffer in private storage")
        return base
    }
}

/// Zeroed memory whose end sits within 63 bytes of an inaccessible page, so a kernel reading or
/// writing past a buffer faults instead of quietly touching a neighbour. The start is 64-byte
/// aligned (vector loads).
struct GuardedMemory: @unchecked Sendable {
    let base: UnsafeMutableRawPointer
    private let mapping: UnsafeMutableRawPointer
    private let mappingLength: Int

    init?(length: Int) {
        let page = MetalCPUDevice.pageSize
        let pages = (length + 63 + page - 1) / page
        mappingLength = (pages + 1) * page
        guard let m = mmap(nil, mappingLength, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
              m != MAP_FAILED else { return nil }
        mapping = m
        let guardPage = m + pages * page
        mprotect(guardPage, page, PROT_NONE)
        base = UnsafeMutableRawPointer(bitPattern: (Int(bitPattern: guardPage) - length) & ~63)!
    }

    func release() { munmap(mapping, mappingLength) }
}
