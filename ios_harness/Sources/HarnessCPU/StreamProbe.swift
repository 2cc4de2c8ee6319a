import Foundation
import HarnessCore
import HarnessModel

/// Measures the read bandwidth a matvec can hope for: buffers far larger than the last-level
/// cache, read with the raw loop's own thread split, in the layouts of Q8_0 and Q4_0 rows.
/// The `*_layout` patterns touch every block with minimal arithmetic (the ceiling); the
/// `*_kernel` patterns run the engine's real kernels over the same bytes (what arithmetic costs).
public struct StreamProbe {
    public struct Measurement: Codable, Sendable {
        public var pattern: String
        public var bytes: Int
        public var bestGBPerS: Double
        public var medianGBPerS: Double
        public var repeats: Int

        enum CodingKeys: String, CodingKey {
            case pattern, bytes, repeats
            case bestGBPerS = "best_gb_s"
            case medianGBPerS = "median_gb_s"
        }
    }

    public struct Report: Codable, Sendable {
        public var harnessBuild: String
        public var host: HostInfo
        public var threads: Int
        public var bufferBytes: Int
        public var lastLevelCacheBytes: Int?
        public var rowElements: Int
        public var kernels: String
        public var results: [Measurement]

        enum CodingKeys: String, CodingKey {
            case host, threads, results
            case harnessBuild = "harness_build"
            case bufferBytes = "buffer_bytes"
            case lastLevelCacheBytes = "last_level_cache_bytes"
            case rowElements = "row_elements"
            case kernels
        }
    }

    public var threads: Int
    public var bufferBytes: Int
    public var repeats: Int
    public var rowElements = 4096
    /// The kernels the `*_kernel` patterns run (the engine's default).
    public var kernels = KernelFamily.best
    let clock = SystemClock()

    /// Sizes the buffer at 16x the last-level cache (at least 256 MiB), capped at a quarter of RAM.
    public static func defaultBufferBytes(host: HostInfo) -> Int {
        let llc = host.lastLevelCacheBytes ?? (32 << 20)
        let cap = Int(host.memoryBytes / 4)
        return max(256 << 20, min(16 * llc, cap))
    }

    public init(threads: Int, bufferBytes: Int, repeats: Int = 7) {
        self.threads = max(1, threads)
        self.bufferBytes = bufferBytes
        self.repeats = max(1, repeats)
    }

    public func run(host: HostInfo = .current(), patterns: [String]? = nil) -> Report {
        let pool = WorkerPool(threads: threads)
        defer { pool.stop() }
        let raw = UnsafeMutableRawPointer.allocate(byteCount: bufferBytes + 64, alignment: 2 << 20)
        defer { raw.deallocate() }
        #if os(Linux)
        _ = madvise(raw, bufferBytes, 14 /* MADV_HUGEPAGE */)
        #endif
        // Fill in parallel (first touch places pages) with blocks whose f16 scales are 1.0.
        pool.run { id in
            let r = WorkerPool.share(bufferBytes / 8, id, pool.parts)
            var state = UInt64(id + 1) &* 0x9E37_79B9_7F4A_7C15
            for i in stride(from: r.lowerBound * 8, to: r.upperBound * 8, by: 8) {
                state = state &* 6364136223846793005 &+ 1442695040888963407
                raw.storeBytes(of: state & 0x0F0F_0F0F_0F0F_0F0F, toByteOffset: i, as: UInt64.self)
            }
        }
        var results: [Measurement] = []
        let all = ["stream", "q8_0_layout", "q4_0_layout", "q8_0_kernel", "q4_0_kernel"]
        for pattern in patterns ?? all {
            results.append(measure(pattern, raw: raw, pool: pool))
        }
        return Report(
            harnessBuild: HarnessBuild.id, host: host, threads: threads, bufferBytes: bufferBytes,
            lastLevelCacheBytes: host.lastLevelCacheBytes, rowElements: rowElements, kernels: kernels.rawValue,
            results: results)
    }

    private func measure(_ pattern: String, raw: UnsafeMutableRawPointer, pool: WorkerPool) -> Measurement {
        let blockBytes = pattern.hasPrefix("q4_0") ? 18 : 34
        let rowBytes = rowElements / 32 * blockBytes
        let rows = bufferBytes / rowBytes
        let sink = UnsafeMutablePointer<UInt64>.allocate(capacity: pool.parts * 8)
        defer { sink.deallocate() }
        let out = UnsafeMutablePointer<Float>.allocate(capacity: rows)
        defer { out.deallocate() }
        var pass: () -> Int
        switch pattern {
        case "stream":
            let bytes = bufferBytes / 64 * 64
            pass = {
                pool.run { id in sink[id * 8] = Self.streamRead(raw, WorkerPool.share(bytes / 64, id, pool.parts)) }
                return bytes
            }
        case "q8_0_layout", "q4_0_layout":
            for r in 0..<rows { Self.setScales(raw + r * rowBytes, blocks: rowElements / 32, blockBytes: blockBytes) }
            pass = {
                pool.run { id in
                    sink[id * 8] = Self.blockRead(raw, rows: WorkerPool.share(rows, id, pool.parts), rowBytes: rowBytes,
                                                  blockBytes: blockBytes)
                }
                return rows * rowBytes
            }
        default:
            for r in 0..<rows { Self.setScales(raw + r * rowBytes, blocks: rowElements / 32, blockBytes: blockBytes) }
            let type: GGMLType = pattern.hasPrefix("q4_0") ? .q4_0 : .q8_0
            let matrix = WeightMatrix(probe: UnsafeRawPointer(raw), rows: rows, cols: rowElements, type: type).assumingRepacked()
            let input = PreparedInput(length: rowElements, maxColumns: 1)
            let x = (0..<rowElements).map { Float(($0 * 7919) % 255) / 255 - 0.5 }
            x.withUnsafeBufferPointer { input.prepare($0.baseAddress!, count: 1, q8: true, q4: true, plain: true) }
            pass = {
                pool.run { id in
                    matrix.multiply(rows: WorkerPool.share(rows, id, pool.parts), input: input, out: out, outStride: rows,
                                    kernels: kernels)
                }
                return rows * rowBytes
            }
        }
        _ = pass()
        var rates: [Double] = []
        for _ in 0..<repeats {
            let t0 = clock.nowNs()
            let bytes = pass()
            let dt = Double(clock.nowNs() - t0) * 1e-9
            rates.append(Double(bytes) / dt / 1e9)
        }
        rates.sort()
        return Measurement(pattern: pattern, bytes: pattern == "stream" ? bufferBytes / 64 * 64 : rows * rowBytes,
                           bestGBPerS: rates.last!, medianGBPerS: rates[rates.count / 2], repeats: repeats)
    }

    /// Scales of 1.0 where a repacked row keeps them (before its quants).
    private static func setScales(_ row: UnsafeMutableRawPointer, blocks: Int, blockBytes: Int) {
        for b in 0..<blocks { row.storeBytes(of: UInt16(0x3C00), toByteOffset: b * 2, as: UInt16.self) }
    }

    /// Reads 64-byte vectors `range` (in vector units), folding them so the loads stay live.
    @inline(never)
    static func streamRead(_ base: UnsafeRawPointer, _ range: Range<Int>) -> UInt64 {
        var a = SIMD16<UInt32>(), b = SIMD16<UInt32>()
        var i = range.lowerBound
        while i &+ 1 < range.upperBound {
            a ^= base.load(fromByteOffset: i &* 64, as: SIMD16<UInt32>.self)
            b ^= base.load(fromByteOffset: (i &+ 1) &* 64, as: SIMD16<UInt32>.self)
            i &+= 2
        }
        if i < range.upperBound { a ^= base.load(fromByteOffset: i &* 64, as: SIMD16<UInt32>.self) }
        let c = a ^ b
        return UInt64(c.wrappedSum())
    }

    /// Touches every block of each row the way the kernels do: scale, then the quants.
    @inline(never)
    static func blockRead(_ base: UnsafeRawPointer, rows: Range<Int>, rowBytes: Int, blockBytes: Int) -> UInt64 {
        var acc = SIMD16<UInt16>()
        var scales: UInt16 = 0
        for r in rows {
            var p = base + r &* rowBytes
            let end = p + rowBytes
            if blockBytes == 34 {
                while p < end {
                    scales ^= p.loadUnaligned(as: UInt16.self)
                    acc ^= unsafeBitCast(p.loadUnaligned(fromByteOffset: 2, as: SIMD32<UInt8>.self), to: SIMD16<UInt16>.self)
                    p += 34
                }
            } else {
                while p < end {
                    scales ^= p.loadUnaligned(as: UInt16.self)
                    let q = p.loadUnaligned(fromByteOffset: 2, as: SIMD8<UInt16>.self)
                    acc ^= SIMD16(lowHalf: q, highHalf: q)
                    p += 18
                }
            }
        }
        return UInt64(acc.wrappedSum()) ^ UInt64(scales)
    }
}

extension WeightMatrix {
    /// A matrix over probe memory (no GGUF file behind it).
    init(probe data: UnsafeRawPointer, rows: Int, cols: Int, type: GGMLType) {
        name = "probe"
        self.data = data
        self.rows = rows
        self.cols = cols
        self.type = type
        rowBytes = cols / type.block.elements * type.block.bytes
    }
}
