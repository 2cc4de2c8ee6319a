// The one place HarnessMetal picks its Metal: Apple's where it exists, MetalCPU (the emulation
// in Tools/MetalCPU, linked on Linux only) elsewhere. No other file imports either.
#if canImport(Metal)
@_exported import Metal
#else
@_exported import MetalCPU
#endif

public enum MetalPlatform {
    /// Whether this build runs Metal emulated on the CPU: results then say so, and no time they
    /// hold is a GPU figure.
    #if canImport(Metal)
    public static let emulated = false
    #else
    public static let emulated = true
    #endif

    /// The default Metal device's name, or nil without one.
    public static var deviceName: String? { MTLCreateSystemDefaultDevice()?.name }
}
