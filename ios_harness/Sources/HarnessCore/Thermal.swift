import Foundation

/// Reads the device's thermal state. Apple platforms have `ProcessInfo.thermalState`; other
/// hosts have no equivalent and report nothing (an empty `thermal` list, not a guess).
public protocol ThermalProbe: Sendable {
    /// The state now, or nil where the platform has no notion of it.
    func current() -> ThermalState?
    /// State changes observed since the last call, stamped with `SystemClock` ns.
    func drainChanges() -> [(tNs: UInt64, state: ThermalState)]
    /// Whether Low Power Mode is on, or nil where the platform has no notion of it.
    func lowPowerMode() -> Bool?
}

extension ThermalProbe {
    public func drainChanges() -> [(tNs: UInt64, state: ThermalState)] { [] }
    public func lowPowerMode() -> Bool? { nil }
}

/// For hosts without a thermal state (Linux): records no samples.
public struct NoThermalProbe: ThermalProbe {
    public init() {}
    public func current() -> ThermalState? { nil }
}

#if canImport(Darwin)
/// `ProcessInfo.thermalState`: read at each phase boundary by the trial runner, and every change
/// notified in between is recorded. The state is read once before registering for the
/// notification (the notification is not delivered otherwise).
public final class ProcessThermalProbe: ThermalProbe, @unchecked Sendable {
    private let lock = NSLock()
    private var changes: [(tNs: UInt64, state: ThermalState)] = []
    private var observer: (any NSObjectProtocol)?

    public init(clock: any MonotonicClock = SystemClock()) {
        _ = ProcessInfo.processInfo.thermalState
        observer = NotificationCenter.default.addObserver(
            forName: ProcessInfo.thermalStateDidChangeNotification, object: nil, queue: nil
        ) { [weak self] _ in
            guard let self, let state = self.current() else { return }
            let t = clock.nowNs()
            self.lock.withLock { self.changes.append((t, state)) }
        }
    }

    deinit {
        if let observer { NotificationCenter.default.removeObserver(observer) }
    }

    public func current() -> ThermalState? {
        switch ProcessInfo.processInfo.thermalState {
        case .nominal: return .nominal
        case .fair: return .fair
        case .serious: return .serious
        case .critical: return .critical
        @unknown default: return .critical
        }
    }

    public func drainChanges() -> [(tNs: UInt64, state: ThermalState)] {
        lock.withLock {
            defer { changes.removeAll() }
            return changes
        }
    }

    public func lowPowerMode() -> Bool? {
        ProcessInfo.processInfo.isLowPowerModeEnabled
    }
}
#else
/// The phone twin's seam, on hosts without `ProcessInfo.thermalState` only: `harness app` reads
/// the state it reports from `HARNESS_THERMAL_STATE` (`nominal|fair|serious|critical`) and Low
/// Power Mode from `HARNESS_LOW_POWER` (`0|1|false|true`). Unset means unknown (nil), as on any
/// Linux host. It does not exist on Apple platforms, so no build of the app can be told a state.
public struct EnvironmentThermalProbe: ThermalProbe {
    public static let stateVariable = "HARNESS_THERMAL_STATE"
    public static let lowPowerVariable = "HARNESS_LOW_POWER"

    public let state: ThermalState?
    public let lowPower: Bool?

    /// Refuses values outside the lists above: a twin misconfigured is said, not guessed.
    public init(environment: [String: String]) throws(LaunchProblem) {
        var state: ThermalState?
        var lowPower: Bool?
        if let text = environment[Self.stateVariable] {
            guard let s = ThermalState(rawValue: text) else {
                throw .environment("\(Self.stateVariable)=\(text) is not one of nominal, fair, serious, critical")
            }
            state = s
        }
        if let text = environment[Self.lowPowerVariable] {
            switch text {
            case "1", "true": lowPower = true
            case "0", "false": lowPower = false
            default: throw .environment("\(Self.lowPowerVariable)=\(text) is not one of 0, 1, false, true")
            }
        }
        self.state = state
        self.lowPower = lowPower
    }

    public func current() -> ThermalState? { state }
    public func lowPowerMode() -> Bool? { lowPower }
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

    /// The probe of the app path (the iOS app, `harness app`): `ProcessInfo` on Apple platforms,
    /// where `environment` is ignored; elsewhere `EnvironmentThermalProbe` (the twin's seam).
    public static func appProbe(environment: [String: String]) throws(LaunchProblem) -> any ThermalProbe {
        #if canImport(Darwin)
        return ProcessThermalProbe()
        #else
        return try EnvironmentThermalProbe(environment: environment)
        #endif
    }
}
