// swift-tools-version:6.0
// The benchmark harness: protocol v1 types, the trial runner, the raw-loop engines and the CLI.
// No outside packages: the machines that build this cannot fetch any.
import PackageDescription

/// Linux x86_64 builds compile for a named CPU so the SIMD kernels get AVX2/FMA/F16C.
/// `HARNESS_TARGET_CPU` overrides it (for example `znver4`, `skylake-avx512`, or `x86-64` for
/// the portable baseline). Apple builds use the platform default.
var cpuFlags: [SwiftSetting] = []
var cFlags: [CSetting] = []
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
        .library(name: "HarnessCPU", targets: ["HarnessCPU"]),
        .library(name: "HarnessMetal", targets: ["HarnessMetal"]),
        .executable(name: "harness", targets: ["harness"]),
    ],
    targets: [
        .target(name: "HarnessCore"),
        // C only where Swift's SIMD types cannot say it: x86 int8 dot instructions (pmaddubsw).
        .target(name: "HarnessKernels", cSettings: cFlags),
        .target(name: "HarnessCPU", dependencies: ["HarnessCore", "HarnessKernels"], swiftSettings: cpuFlags),
        // Metal on Apple platforms; elsewhere MetalCPU, the emulation (its seam: Metal+Platform.swift).
        .target(
            name: "HarnessMetal",
            dependencies: ["HarnessCore", "HarnessCPU", .target(name: "MetalCPU", condition: .when(platforms: [.linux]))],
            exclude: ["README.md"]
        ),
        // The Metal API subset HarnessMetal uses, emulated on the CPU (Linux only; never in the
        // iOS app): MSL compiled by clang as C++, run by a fiber runtime with Metal's
        // threadgroup and SIMD-group semantics. See Tools/MetalCPU/README.md.
        .target(name: "MetalCPURuntime", path: "Tools/MetalCPURuntime", cSettings: [.unsafeFlags(["-O2"])]),
        .target(name: "MetalCPU", dependencies: ["MetalCPURuntime"], path: "Tools/MetalCPU", exclude: ["README.md"]),
        .executableTarget(
            name: "harness",
            dependencies: ["HarnessCore", "HarnessCPU", "HarnessMetal"]
        ),
        .testTarget(
            name: "HarnessCoreTests",
            dependencies: ["HarnessCore"]
        ),
        .testTarget(
            name: "MetalCPUTests",
            dependencies: ["MetalCPU"]
        ),
        .testTarget(
            name: "HarnessCPUTests",
            dependencies: ["HarnessCore", "HarnessCPU"],
            swiftSettings: cpuFlags
        ),
    ]
)
