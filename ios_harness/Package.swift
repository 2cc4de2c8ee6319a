// swift-tools-version:6.0
// The benchmark harness: protocol v1 types, the trial runner, the raw-loop engines and the CLI.
// No outside packages: the machines that build this cannot fetch any.
import Foundation
import PackageDescription

/// Linux x86_64 builds compile for a named CPU so the SIMD kernels get AVX2/FMA/F16C.
/// `HARNESS_TARGET_CPU` overrides it (for example `znver4`, `skylake-avx512`, or `x86-64` for
/// the portable baseline). Apple builds use the platform default.
var cpuFlags: [SwiftSetting] = []
var cFlags: [CSetting] = []
/// HarnessMetal's Metal: Apple's where the host has it; on Linux MetalCPU, the Metal API subset
/// the engine uses, emulated on the CPU (MSL compiled by clang as C++, run by a fiber runtime
/// with Metal's threadgroup and SIMD-group semantics; see Tools/MetalCPU/README.md). Declared
/// only on Linux hosts, so no Apple build (the iOS app) can contain it.
var metal: [Target.Dependency] = []
var emulation: [Target] = []
#if os(Linux)
metal = ["MetalCPU"]
emulation = [
    // The fiber scheduler is optimized even in debug builds (`swift test`).
    .target(name: "MetalCPURuntime", path: "Tools/MetalCPURuntime", cSettings: [.unsafeFlags(["-O2"])]),
    .target(name: "MetalCPU", dependencies: ["MetalCPURuntime"], path: "Tools/MetalCPU", exclude: ["README.md"]),
    .testTarget(name: "MetalCPUTests", dependencies: ["MetalCPU"]),
]
#endif
#if os(Linux) && arch(x86_64)
let targetCPU = Context.environment["HARNESS_TARGET_CPU"] ?? "haswell"
cpuFlags = [.unsafeFlags(["-target-cpu", targetCPU], .when(platforms: [.linux]))]
cFlags = [.unsafeFlags(["-march=\(targetCPU)", "-O3"], .when(platforms: [.linux]))]
#endif

/// llama.cpp, the `llamacpp` engine (HarnessLlama), where the build has it; everything else builds
/// without it. Linux: a folder with `include/` (llama.h, gguf.h, ggml*.h) and `lib/` (libllama,
/// libggml*) of one pinned llama.cpp build: the one `HARNESS_LLAMA` names (`0`: none), else
/// `.llama` here when `make llama` (Tools/llama-link.py) has linked it from the llamacpp runtime
/// environment's own build. SwiftPM re-evaluates this file when its text or the environment
/// changes, not when a folder appears: after `make llama`, a build from an unchanged shell may need
/// `HARNESS_LLAMA` set (the Makefile always sets it). Apple: `Vendor/llama.xcframework`, built
/// from the same pinned source by its build-xcframework.sh (see docs/llamacpp-engine.md);
/// `HARNESS_LLAMA=0` builds without it. Either way the C API is the module `llama`.
var llamaTargets: [Target] = []
var llamaEngine: [Target.Dependency] = []
/// The Clang include path of llama.h (Linux), and `HARNESS_LLAMA` defined for the code that lists
/// the engine (`harness`'s Engines.swift), in every target that imports HarnessLlama.
var llamaFlags: [SwiftSetting] = []
#if os(Linux)
let linked = Context.packageDirectory + "/.llama"
let llamaDir = Context.environment["HARNESS_LLAMA"]
    ?? (FileManager.default.fileExists(atPath: linked + "/pin.json") ? linked : "0")
if !llamaDir.isEmpty, llamaDir != "0" {
    let dir = llamaDir
    llamaFlags = [.unsafeFlags(["-Xcc", "-I\(dir)/include"]), .define("HARNESS_LLAMA")]
    llamaTargets = [.systemLibrary(name: "llama", path: "Tools/llama")]
    llamaEngine = ["HarnessLlama"]
    llamaTargets += [
        .target(name: "HarnessLlama", dependencies: ["HarnessCore", "llama"],
                swiftSettings: llamaFlags,
                linkerSettings: [.unsafeFlags(["-L\(dir)/lib", "-Xlinker", "-rpath", "-Xlinker", "\(dir)/lib"])]),
        .testTarget(name: "HarnessLlamaTests", dependencies: ["HarnessCore", "HarnessModel", "HarnessCPU", "HarnessLlama"],
                    swiftSettings: llamaFlags + cpuFlags),
    ]
}
#else
if Context.environment["HARNESS_LLAMA"] != "0",
   FileManager.default.fileExists(atPath: Context.packageDirectory + "/Vendor/llama.xcframework") {
    llamaTargets = [
        .binaryTarget(name: "llama", path: "Vendor/llama.xcframework"),
        .target(name: "HarnessLlama", dependencies: ["HarnessCore", "llama"]),
        .testTarget(name: "HarnessLlamaTests", dependencies: ["HarnessCore", "HarnessModel", "HarnessCPU", "HarnessLlama"]),
    ]
    llamaEngine = ["HarnessLlama"]
    llamaFlags = [.define("HARNESS_LLAMA")]
}
#endif

let package = Package(
    name: "Harness",
    platforms: [.macOS(.v15), .iOS(.v18)],
    products: [
        .library(name: "HarnessCore", targets: ["HarnessCore"]),
        .library(name: "HarnessModel", targets: ["HarnessModel"]),
        .library(name: "HarnessCPU", targets: ["HarnessCPU"]),
        .library(name: "HarnessMetal", targets: ["HarnessMetal"]),
    ] + (llamaEngine.isEmpty ? [] : [.library(name: "HarnessLlama", targets: ["HarnessLlama"])]) + [
        .executable(name: "harness", targets: ["harness"]),
    ],
    targets: [
        .target(name: "HarnessCore"),
        // What every engine reading a llama GGUF shares: the reader, the config, the checked layout.
        .target(name: "HarnessModel", dependencies: ["HarnessCore"]),
        // C only where Swift's SIMD types cannot say it: x86 int8 dot instructions (pmaddubsw).
        .target(name: "HarnessKernels", cSettings: cFlags),
        .target(name: "HarnessCPU", dependencies: ["HarnessCore", "HarnessModel", "HarnessKernels"], swiftSettings: cpuFlags),
        // The seam picking Metal or MetalCPU is one file: Metal+Platform.swift.
        .target(name: "HarnessMetal", dependencies: ["HarnessCore", "HarnessModel"] + metal, exclude: ["README.md"]),
        .executableTarget(
            name: "harness",
            dependencies: ["HarnessCore", "HarnessModel", "HarnessCPU", "HarnessMetal"] + llamaEngine,
            swiftSettings: llamaFlags
        ),
        .testTarget(
            name: "HarnessCoreTests",
            dependencies: ["HarnessCore"]
        ),
        .testTarget(
            name: "HarnessMetalTests",
            dependencies: ["HarnessCore", "HarnessModel", "HarnessCPU", "HarnessMetal"],
            swiftSettings: cpuFlags
        ),
        .testTarget(
            name: "HarnessCPUTests",
            dependencies: ["HarnessCore", "HarnessModel", "HarnessCPU"],
            swiftSettings: cpuFlags
        ),
    ] + emulation + llamaTargets
)
