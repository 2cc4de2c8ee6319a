#if canImport(Darwin)
import Foundation
#endif

/// Reads the device's thermal state. Apple platforms have `ProcessInfo.thermalState`; other
/// hosts have no equivalent and report nothing (an empty `thermal` list, not a guess).
public protocol ThermalProbe: Sendable {
    /// The state now, or nil where the platform has no notion of it.
    func current() -> ThermalState?
    /// State changes observed since the last call, stamped with `SystemClock` ns.
    func drainChanges() -> [(tNs: UInt64, state: ThermalState)]
}

extension ThermalProbe {
    public func drainChanges() -> [(tNs: UInt64, state: ThermalState)] { [] }
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
