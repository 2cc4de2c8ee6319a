// `@preconcurrency`: `setvbuf(stdout, ...)` reads a C global that Swift 6 mode otherwise refuses.
#if canImport(Darwin)
@preconcurrency import Darwin
#elseif canImport(Glibc)
@preconcurrency import Glibc
#endif
import Foundation

/// One level of the CPU cache hierarchy.
public struct CacheInfo: Codable, Equatable, Sendable {
    public var level: Int
    public var type: String
    public var sizeBytes: Int
    /// How many logical CPUs share one instance of this cache.
    public var sharedCpus: Int?

    enum CodingKeys: String, CodingKey {
        case level, type
        case sizeBytes = "size_bytes"
        case sharedCpus = "shared_cpus"
    }
}

/// What `harness info` reports about the host. Every libc and sysfs read lives here.
public struct HostInfo: Codable, Sendable {
    public var os: String
    public var arch: String
    public var cpuModel: String
    public var logicalCpus: Int
    public var memoryBytes: UInt64
    public var caches: [CacheInfo]

    enum CodingKeys: String, CodingKey {
        case os, arch
        case cpuModel = "cpu_model"
        case logicalCpus = "logical_cpus"
        case memoryBytes = "memory_bytes"
        case caches
    }

    /// The largest data/unified cache: the one a stream probe must overflow.
    public var lastLevelCacheBytes: Int? {
        caches.filter { $0.type != "Instruction" }.max { ($0.level, $0.sizeBytes) < ($1.level, $1.sizeBytes) }?.sizeBytes
    }

    public static func current() -> HostInfo {
        HostInfo(
            os: "\(osName) \(ProcessInfo.processInfo.operatingSystemVersionString)",
            arch: archName,
            cpuModel: Platform.cpuModel(),
            logicalCpus: ProcessInfo.processInfo.activeProcessorCount,
            memoryBytes: ProcessInfo.processInfo.physicalMemory,
            caches: Platform.caches())
    }

    static var osName: String {
        #if os(iOS)
        return "iOS"
        #elseif os(macOS)
        return "macOS"
        #elseif os(Linux)
        return "Linux"
        #else
        return "unknown"
        #endif
    }

    static var archName: String {
        #if arch(arm64)
        return "arm64"
        #elseif arch(x86_64)
        return "x86_64"
        #else
        return "unknown"
        #endif
    }
}

enum Platform {
    /// Physical performance cores (`hw.perflevel0.physicalcpu`) on Apple silicon; nil elsewhere,
    /// and on Apple machines without performance levels (Intel Macs).
    static func performanceCores() -> Int? {
        #if canImport(Darwin)
        return sysctlInt("hw.perflevel0.physicalcpu").flatMap { $0 > 0 ? $0 : nil }
        #else
        return nil
        #endif
    }

    /// Makes stdio's stdout line-buffered: an app launched through DVT gets a block-buffered one.
    static func lineBufferStdout() {
        setvbuf(stdout, nil, _IOLBF, 0)
    }

    static func cpuModel() -> String {
        #if canImport(Darwin)
        return sysctlString("machdep.cpu.brand_string") ?? sysctlString("hw.machine") ?? "unknown"
        #else
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return "unknown" }
        for line in text.split(separator: "\n") where line.hasPrefix("model name") {
            if let colon = line.firstIndex(of: ":") {
                return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return "unknown"
        #endif
    }

    static func caches() -> [CacheInfo] {
        #if canImport(Darwin)
        var out: [CacheInfo] = []
        if let v = sysctlInt("hw.l1dcachesize") { out.append(CacheInfo(level: 1, type: "Data", sizeBytes: v)) }
        if let v = sysctlInt("hw.l2cachesize") { out.append(CacheInfo(level: 2, type: "Unified", sizeBytes: v)) }
        if let v = sysctlInt("hw.l3cachesize"), v > 0 { out.append(CacheInfo(level: 3, type: "Unified", sizeBytes: v)) }
        return out
        #else
        return linuxCaches(root: "/sys/devices/system/cpu/cpu0/cache")
        #endif
    }

    /// Reads `index*/{level,type,size,shared_cpu_list}` under a sysfs cache directory.
    static func linuxCaches(root: String) -> [CacheInfo] {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: root) else { return [] }
        var out: [CacheInfo] = []
        for entry in entries.sorted() where entry.hasPrefix("index") {
            func read(_ name: String) -> String? {
                (try? String(contentsOfFile: "\(root)/\(entry)/\(name)", encoding: .utf8))?
                    .trimmingCharacters(in: .whitespacesAndNewlines)
            }
            guard let level = read("level").flatMap(Int.init), let type = read("type"),
                  let size = read("size").flatMap(parseSize) else { continue }
            out.append(CacheInfo(level: level, type: type, sizeBytes: size,
                                 sharedCpus: read("shared_cpu_list").map(countCpuList)))
        }
        return out
    }

    /// "32768K" -> 33554432; "2M" -> 2097152; "512" -> 512.
    static func parseSize(_ text: String) -> Int? {
        let units: [Character: Int] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30]
        if let last = text.last, let unit = units[last] {
            return Int(text.dropLast()).map { $0 * unit }
        }
        return Int(text)
    }

    /// "0-3,8" -> 5.
    static func countCpuList(_ text: String) -> Int {
        text.split(separator: ",").reduce(0) { total, part in
            let bounds = part.split(separator: "-").compactMap { Int($0) }
            return total + (bounds.count == 2 ? bounds[1] - bounds[0] + 1 : 1)
        }
    }

    #if canImport(Darwin)
    static func sysctlString(_ name: String) -> String? {
        var size = 0
        guard sysctlbyname(name, nil, &size, nil, 0) == 0, size > 0 else { return nil }
        var buf = [CChar](repeating: 0, count: size)
        guard sysctlbyname(name, &buf, &size, nil, 0) == 0 else { return nil }
        return String(cString: buf)
    }

    static func sysctlInt(_ name: String) -> Int? {
        var value: Int64 = 0
        var size = MemoryLayout<Int64>.size
        guard sysctlbyname(name, &value, &size, nil, 0) == 0 else { return nil }
        return Int(value)
    }
    #endif
}
