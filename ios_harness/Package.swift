// swift-tools-version:6.0
// The benchmark harness: protocol v1 types, the trial runner, the raw-loop engines and the CLI.
// No outside packages: the machines that build this cannot fetch any.
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

let package = Package(
    name: "Harness",
    platforms: [.macOS(.v15), .iOS(.v18)],
    products: [
        .library(name: "HarnessCore", targets: ["HarnessCore"]),
        .library(name: "HarnessModel", targets: ["HarnessModel"]),
        .library(name: "HarnessCPU", targets: ["HarnessCPU"]),
        .library(name: "HarnessMetal", targets: ["HarnessMetal"]),
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
            dependencies: ["HarnessCore", "HarnessModel", "HarnessCPU", "HarnessMetal"]
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
    ] + emulation
)
