import Foundation

/// `--probe KIND`: a short launch that reads one thing only the app can read, writes it
/// atomically, prints the sentinel and exits. The controller uses `--probe thermal` for
/// telemetry: iOS has no host-side thermal state.
public enum AppProbe {
    public enum Kind: String, CaseIterable, Sendable {
        case thermal
    }

    /// What `--probe thermal` writes, e.g.
    /// `{"harness_build":"...","low_power":false,"t_ns":123,"thermal_state":"nominal"}`.
    /// `thermal_state` and `low_power` are null where the platform cannot say (a Linux host
    /// without the twin's variables); `t_ns` is the monotonic clock results use (`SystemClock`).
    public struct ThermalReading: Codable, Equatable, Sendable {
        public var thermalState: ThermalState?
        public var lowPower: Bool?
        public var tNs: UInt64
        public var harnessBuild: String

        enum CodingKeys: String, CodingKey, CaseIterable {
            case thermalState = "thermal_state"
            case lowPower = "low_power"
            case tNs = "t_ns"
            case harnessBuild = "harness_build"
        }

        public init(thermalState: ThermalState?, lowPower: Bool?, tNs: UInt64, harnessBuild: String = HarnessBuild.id) {
            self.thermalState = thermalState
            self.lowPower = lowPower
            self.tNs = tNs
            self.harnessBuild = harnessBuild
        }

        public init(from decoder: Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            thermalState = try c.decodeIfPresent(ThermalState.self, forKey: .thermalState)
            lowPower = try c.decodeIfPresent(Bool.self, forKey: .lowPower)
            tNs = try c.decode(UInt64.self, forKey: .tNs)
            harnessBuild = try c.decode(String.self, forKey: .harnessBuild)
        }

        /// Unknown values are written as null, not left out: the reader sees what was asked.
        public func encode(to encoder: Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(thermalState, forKey: .thermalState)
            try c.encode(lowPower, forKey: .lowPower)
            try c.encode(tNs, forKey: .tNs)
            try c.encode(harnessBuild, forKey: .harnessBuild)
        }
    }

    /// The sentinel's id for a probe output: its file name without `.json`
    /// (`results/probe-000001.json` -> `probe-000001`), the token the controller waits for.
    public static func token(forOut path: String) -> String {
        let name = URL(fileURLWithPath: path).lastPathComponent
        return name.hasSuffix(".json") && name.count > 5 ? String(name.dropLast(5)) : name
    }

    /// Reads, writes `out` atomically, emits `HARNESS_DONE <token> <out>`. Exit code: 0 with a
    /// thermal state, 2 written without one, 3 not writable.
    static func write(
        _ kind: Kind, to out: String, token: String, thermal: any ThermalProbe, clock: any MonotonicClock,
        emit: (String) -> Void
    ) -> Int32 {
        switch kind {
        case .thermal:
            let reading = ThermalReading(thermalState: thermal.current(), lowPower: thermal.lowPowerMode(), tNs: clock.nowNs())
            do {
                try AtomicFile.write(ProtocolJSON.encoder().encode(reading), to: out)
            } catch {
                emit("harness: cannot write probe output: \(error)")
                return SpecRun.exitUnwritable
            }
            emit(SpecRun.sentinel(trialId: token, path: out))
            return reading.thermalState == nil ? SpecRun.exitErrorResult : SpecRun.exitOK
        }
    }
}
