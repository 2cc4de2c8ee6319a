import Foundation
import MetalCPURuntime
#if canImport(Glibc)
import Glibc
#endif

/// MSL source -> shared object: clang preprocesses the source against the prelude in scan mode
/// (for the kernel scanner), then compiles the source and the generated glue as C++ into a
/// shared object, which is loaded with dlopen. Libraries are cached in the process by source
/// and math mode (clang runs once per distinct source); nothing is cached on disk.
enum MSLCompiler {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var cache: [String: CompiledLibrary] = [:]

    /// `defines` are the device's feature macros (which SIMD-group functions its family has).
    static func compile(source: String, mathMode: MTLMathMode, defines: [String], clang: String?) throws -> CompiledLibrary {
        try lock.withLock {
            let key = "\(mathMode.rawValue) \(defines.joined(separator: " "))\n\(source)"
            if let hit = cache[key] { return hit }
            let library = try build(source: source, flags: flags(mathMode: mathMode) + defines.map { "-D\($0)=1" },
                                    clang: try locateClang(clang))
            cache[key] = library
            return library
        }
    }

    /// The compile flags besides the files: C++17 without the C++ library (MSL has none), signed
    /// `char` as in MSL, `half` without excess precision, unknown attributes as errors.
    static func flags(mathMode: MTLMathMode) -> [String] {
        var f = ["-x", "c++", "-std=c++17", "-O2", "-fPIC", "-shared", "-fsigned-char", "-fno-exceptions", "-fno-rtti",
                 "-nostdinc++", "-Xclang", "-ffloat16-excess-precision=none", "-Werror=unknown-attributes",
                 "-Werror=ignored-attributes", "-Werror=return-type", "-Wno-unused-value", "-Wno-nan-infinity-disabled",
                 // Large frames touch every page in order, so an overflow meets the guard page.
                 "-fstack-clash-protection"]
        switch mathMode {
        case .safe: f += ["-fno-fast-math", "-ffp-contract=off"]
        case .relaxed: f += ["-fno-fast-math", "-ffp-contract=fast"]
        case .fast: f += ["-ffast-math"]
        }
        #if arch(x86_64)
        // The library runs where it is compiled.
        f += ["-march=native"]
        #endif
        return f
    }

    private static func build(source: String, flags: [String], clang: String) throws -> CompiledLibrary {
        let fm = FileManager.default
        let dir = fm.temporaryDirectory.appendingPathComponent("metalcpu-\(getpid())-\(UUID().uuidString)")
        let include = dir.appendingPathComponent("include")
        try fm.createDirectory(at: include, withIntermediateDirectories: true)
        defer { try? fm.removeItem(at: dir) }
        try MSLPrelude.text.write(to: include.appendingPathComponent(MSLPrelude.fileName), atomically: true, encoding: .utf8)
        try source.write(to: dir.appendingPathComponent("shader.metal"), atomically: true, encoding: .utf8)

        try run(clang, ["-x", "c++", "-std=c++17", "-nostdinc++", "-E", "-P", "-D__METALCPU_SCAN__=1", "-I", include.path,
                        "shader.metal", "-o", "scan.ii"], in: dir)
        let kernels: [KernelScanner.Kernel]
        do {
            kernels = try KernelScanner.scan(String(contentsOf: dir.appendingPathComponent("scan.ii"), encoding: .utf8))
        } catch let e as MetalCPUError {
            throw MetalCPUError("MSL compilation failed (emulated Metal): \(e.description)")
        }
        try KernelScanner.glue(kernels, sourceFile: "shader.metal")
            .write(to: dir.appendingPathComponent("glue.cpp"), atomically: true, encoding: .utf8)
        let object = dir.appendingPathComponent("library.so")
        try run(clang, flags + ["-I", include.path, "-o", object.path, "glue.cpp", "-lm"], in: dir)
        return try load(object.path, expected: kernels)
    }

    private static func load(_ path: String, expected: [KernelScanner.Kernel]) throws -> CompiledLibrary {
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
            throw MetalCPUError("cannot load the compiled shader library: \(String(cString: dlerror()))")
        }
        guard let abi = dlsym(handle, "__mtlcpu_abi")?.assumingMemoryBound(to: UInt32.self),
              let initSym = dlsym(handle, "__mtlcpu_init"),
              let table = dlsym(handle, "__mtlcpu_kernels")?.assumingMemoryBound(to: mtlcpu_kernel_info.self) else {
            throw MetalCPUError("the compiled shader library lacks its kernel table")
        }
        guard abi[0] == MTLCPU_ABI_VERSION, abi[1] == MemoryLayout<mtlcpu_builtins>.size,
              abi[2] == MemoryLayout<mtlcpu_api>.size, abi[3] == MemoryLayout<mtlcpu_kernel_info>.size else {
            throw MetalCPUError("the prelude's ABI (\(abi[0]), \(abi[1]), \(abi[2]), \(abi[3])) does not match the runtime's")
        }
        typealias Init = @convention(c) (UnsafePointer<mtlcpu_api>) -> Void
        unsafeBitCast(initSym, to: Init.self)(mtlcpu_api_table())
        var kernels: [String: CompiledKernel] = [:]
        var i = 0
        while let name = table[i].name {
            let info = table[i]
            let args = (0..<Int(info.arg_count)).map { a in
                CompiledKernel.Arg(index: Int(info.arg_index[a]), minBytes: Int(info.arg_min_bytes[a]),
                                   align: Int(info.arg_align[a]), name: String(cString: info.arg_name[a]!))
            }
            let n = String(cString: name)
            kernels[n] = CompiledKernel(name: n, fn: info.fn, args: args, maxThreads: Int(info.max_threads))
            i += 1
        }
        guard kernels.count == expected.count else {
            throw MetalCPUError("the compiled library lists \(kernels.count) kernels, the scan found \(expected.count)")
        }
        return CompiledLibrary(kernels: kernels)
    }

    /// Runs clang; its diagnostics become the error's message.
    private static func run(_ clang: String, _ arguments: [String], in dir: URL) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: clang)
        p.arguments = arguments
        p.currentDirectoryURL = dir
        let err = Pipe()
        p.standardError = err
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        let diagnostics = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        guard p.terminationStatus == 0 else {
            throw MetalCPUError("MSL compilation failed (emulated Metal, clang as C++):\n\(diagnostics)")
        }
    }

    /// `configured`, else `METALCPU_CLANG`, else the clang beside the Swift runtime this process
    /// loaded (the toolchain's), else the first `clang` on PATH.
    static func locateClang(_ configured: String?) throws -> String {
        let fm = FileManager.default
        if let c = configured ?? ProcessInfo.processInfo.environment["METALCPU_CLANG"] {
            guard fm.isExecutableFile(atPath: c) else { throw MetalCPUError("clang '\(c)' is not executable") }
            return c
        }
        if let file = mtlcpu_object_path("swift_retain") {
            // <toolchain>/usr/lib/swift/linux/libswiftCore.so -> <toolchain>/usr/bin/clang
            let bin = URL(fileURLWithPath: String(cString: file)).resolvingSymlinksInPath()
                .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("bin/clang").path
            if fm.isExecutableFile(atPath: bin) { return bin }
        }
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let c = "\(dir)/clang"
            if fm.isExecutableFile(atPath: c) { return c }
        }
        throw MetalCPUError("MetalCPU needs clang to compile shaders: set METALCPU_CLANG or put clang on PATH")
    }
}
