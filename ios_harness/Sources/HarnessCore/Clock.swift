#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

/// The one clock of a trial: monotonic nanoseconds.
/// CLOCK_UPTIME_RAW on Apple (the mach time base Metal's GPU timestamps use), CLOCK_MONOTONIC
/// elsewhere.
public protocol MonotonicClock: Sendable {
    /// Nanoseconds since an arbitrary fixed origin; never goes backwards.
    func nowNs() -> UInt64
}

public struct SystemClock: MonotonicClock {
    public init() {}

    public func nowNs() -> UInt64 {
        #if canImport(Darwin)
        return clock_gettime_nsec_np(CLOCK_UPTIME_RAW)
        #else
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
        #endif
    }
}
