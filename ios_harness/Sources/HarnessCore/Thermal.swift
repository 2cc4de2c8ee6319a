#if canImport(Darwin)
import Foundation
#endif

/// Reads the device's thermal state. Apple platforms have `ProcessInfo.thermalState`; other
/// hosts have no equivalent and report nothing (an empty `thermal` list, not a guess).
public protocol ThermalProbe: Sendable {
    /// The state now, or nil where the platform has no notion of it.
    func current() -> ThermalState?
}

/// For hosts without a thermal state (Linux): records no samples.
public struct NoThermalProbe: ThermalProbe {
    public init() {}
    public func current() -> ThermalState? { nil }
}

#if canImport(Darwin)
/// `ProcessInfo.thermalState`, read at each phase boundary by the trial runner.
public struct ProcessThermalProbe: ThermalProbe {
    public init() {}

    public func current() -> ThermalState? {
        switch ProcessInfo.processInfo.thermalState {
        case .nominal: return .nominal
        case .fair: return .fair
        case .serious: return .serious
        case .critical: return .critical
        @unknown default: return .critical
        }
    }
}
#endif

public enum Thermal {
    /// The probe for this platform.
    public static func platformProbe() -> any ThermalProbe {
        #if canImport(Darwin)
        return ProcessThermalProbe()
        #else
        return NoThermalProbe()
        #endif
    }
}
