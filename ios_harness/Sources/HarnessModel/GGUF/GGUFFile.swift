import HarnessCore

/// ggml tensor types this package reads.
public enum GGMLType: UInt32, Sendable, CustomStringConvertible {
    case f32 = 0
    case f16 = 1
    case q4_0 = 2
    case q8_0 = 8

    /// Elements per block and bytes per block.
    public var block: (elements: Int, bytes: Int) {
        switch self {
        case .f32: return (1, 4)
        case .f16: return (1, 2)
        case .q4_0: return (32, 18)
        case .q8_0: return (32, 34)
        }
    }

    public var description: String {
        switch self {
        case .f32: return "F32"
        case .f16: return "F16"
        case .q4_0: return "Q4_0"
        case .q8_0: return "Q8_0"
        }
    }
}

/// A GGUF metadata value.
public enum GGUFValue: Sendable, Equatable {
    case uint(UInt64)
    case int(Int64)
    case float(Double)
    case bool(Bool)
    case string(String)
    case array([GGUFValue])

    public var asInt: Int? {
        switch self {
        case .uint(let v): return Int(exactly: v)
        case .int(let v): return Int(exactly: v)
        default: return nil
        }
    }

    public var asDouble: Double? {
        switch self {
        case .float(let v): return v
        case .uint(let v): return Double(v)
        case .int(let v): return Double(v)
        default: return nil
        }
    }

    public var asString: String? {
        if case .string(let s) = self { return s }
        return nil
    }
}

public struct GGUFTensor: Sendable {
    public let name: String
    /// ggml order: `dims[0]` is the contiguous (row) length.
    public let dims: [Int]
    public let type: GGMLType
    /// Offset from the start of the file.
    public let offset: Int
    public let byteCount: Int
}

/// A GGUF file (v2 or v3) read whole into memory and checked against its own header.
public final class GGUFFile: @unchecked Sendable {
    public let path: String
    public let version: UInt32
    public let metadata: [String: GGUFValue]
    public let tensors: [String: GGUFTensor]
    let buffer: AlignedBuffer

    public var fileBytes: Int { buffer.count }

    public convenience init(path: String, dropPageCache: Bool = false) throws {
        try self.init(path: path, buffer: AlignedBuffer.read(path: path, dropPageCache: dropPageCache))
    }

    init(path: String, buffer: AlignedBuffer) throws {
        self.path = path
        self.buffer = buffer
        var r = Reader(base: UnsafeRawPointer(buffer.base), count: buffer.count)
        guard try r.u32() == 0x4655_4747 else { throw HarnessError(.badModel, "\(path) is not a GGUF file (bad magic)") }
        version = try r.u32()
        guard version == 2 || version == 3 else { throw HarnessError(.badModel, "GGUF version \(version) is not supported") }
        let tensorCount = try r.count(limit: 1 << 20)
        let kvCount = try r.count(limit: 1 << 20)
        var meta: [String: GGUFValue] = [:]
        for _ in 0..<kvCount {
            let key = try r.string()
            meta[key] = try r.value(type: try r.u32(), depth: 0)
        }
        metadata = meta
        var infos: [(String, [Int], UInt32, Int)] = []
        for _ in 0..<tensorCount {
            let name = try r.string()
            let nd = Int(try r.u32())
            guard (1...4).contains(nd) else { throw HarnessError(.badModel, "tensor \(name) has \(nd) dimensions") }
            var dims: [Int] = []
            for _ in 0..<nd { dims.append(try r.count(limit: 1 << 40)) }
            infos.append((name, dims, try r.u32(), try r.count(limit: Int.max)))
        }
        let alignment = meta["general.alignment"]?.asInt ?? 32
        guard alignment > 0, alignment & (alignment - 1) == 0 else { throw HarnessError(.badModel, "bad general.alignment \(alignment)") }
        let dataStart = (r.offset + alignment - 1) / alignment * alignment
        var out: [String: GGUFTensor] = [:]
        for (name, dims, rawType, rel) in infos {
            guard let type = GGMLType(rawValue: rawType) else {
                throw HarnessError(.badModel, "tensor \(name) has unsupported ggml type \(rawType)")
            }
            let elements = dims.reduce(1) { $0.multipliedReportingOverflow(by: $1).overflow ? Int.max : $0 * $1 }
            let (per, bytes) = type.block
            guard elements != Int.max, dims[0] % per == 0 else {
                throw HarnessError(.badModel, "tensor \(name) shape \(dims) does not fit \(type) blocks")
            }
            let byteCount = elements / per * bytes
            let start = dataStart + rel
            guard rel >= 0, start <= buffer.count, byteCount <= buffer.count - start else {
                throw HarnessError(.badModel, "tensor \(name) lies past the end of the file (truncated?)")
            }
            out[name] = GGUFTensor(name: name, dims: dims, type: type, offset: start, byteCount: byteCount)
        }
        tensors = out
    }

    /// Calls `body` with the file's page-aligned storage and its page-multiple length (for
    /// no-copy GPU buffers); the storage lives as long as this file.
    public func withPageAlignedStorage<R>(_ body: (UnsafeMutableRawPointer, Int) throws -> R) rethrows -> R {
        try body(buffer.base, buffer.capacity)
    }

    /// The bytes of a tensor, valid while this file is alive.
    public func data(_ tensor: GGUFTensor) -> UnsafeRawPointer {
        UnsafeRawPointer(buffer.base + tensor.offset)
    }

    /// Bounds-checked cursor over the header.
    struct Reader {
        let base: UnsafeRawPointer
        let count: Int
        var offset = 0

        mutating func take(_ n: Int) throws -> UnsafeRawPointer {
            guard n >= 0, n <= count - offset else { throw HarnessError(.badModel, "GGUF header is truncated at byte \(offset)") }
            defer { offset += n }
            return base + offset
        }

        mutating func u32() throws -> UInt32 { try take(4).loadUnaligned(as: UInt32.self) }
        mutating func u64() throws -> UInt64 { try take(8).loadUnaligned(as: UInt64.self) }

        mutating func count(limit: Int) throws -> Int {
            let v = try u64()
            guard v <= UInt64(limit) else { throw HarnessError(.badModel, "GGUF count \(v) at byte \(offset - 8) is implausible") }
            return Int(v)
        }

        mutating func string() throws -> String {
            let n = try count(limit: 1 << 30)
            let p = try take(n)
            return String(decoding: UnsafeRawBufferPointer(start: p, count: n), as: UTF8.self)
        }

        mutating func value(type: UInt32, depth: Int) throws -> GGUFValue {
            switch type {
            case 0: return .uint(UInt64(try take(1).load(as: UInt8.self)))
            case 1: return .int(Int64(try take(1).load(as: Int8.self)))
            case 2: return .uint(UInt64(try take(2).loadUnaligned(as: UInt16.self)))
            case 3: return .int(Int64(try take(2).loadUnaligned(as: Int16.self)))
            case 4: return .uint(UInt64(try u32()))
            case 5: return .int(Int64(try take(4).loadUnaligned(as: Int32.self)))
            case 6: return .float(Double(try take(4).loadUnaligned(as: Float.self)))
            case 7: return .bool(try take(1).load(as: UInt8.self) != 0)
            case 8: return .string(try string())
            case 9:
                guard depth < 4 else { throw HarnessError(.badModel, "GGUF arrays nest too deep") }
                let inner = try u32()
                let n = try count(limit: 1 << 26)
                var items: [GGUFValue] = []
                items.reserveCapacity(n)
                for _ in 0..<n { items.append(try value(type: inner, depth: depth + 1)) }
                return .array(items)
            case 10: return .uint(try u64())
            case 11: return .int(Int64(bitPattern: try u64()))
            case 12: return .float(try take(8).loadUnaligned(as: Double.self))
            default: throw HarnessError(.badModel, "GGUF metadata type \(type) is unknown")
            }
        }
    }
}
