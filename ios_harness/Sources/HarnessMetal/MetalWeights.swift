import Foundation
import HarnessCore
import HarnessModel

/// The model file as no-copy Metal buffers over the loaded GGUF. One buffer when the device
/// allows one that large; otherwise several page-aligned views of the file, each at most
/// `maxBufferLength` (iOS reports as little as 1 GiB, less than many models), each holding whole
/// tensors. A tensor is addressed as (its view, its offset in that view).
struct MetalWeights {
    let buffers: [any MTLBuffer]
    private let location: [String: (buffer: Int, offset: Int)]

    /// Bytes of the file the views map (counted against the device's working set).
    var mappedBytes: Int { buffers.reduce(0) { $0 + $1.length } }

    init(file: GGUFFile, device: any MTLDevice, pageSize: Int = Int(getpagesize())) throws {
        let tensors = file.tensors.values.sorted { $0.offset < $1.offset }
        let ranges = try Self.plan(tensors: tensors, pageSize: pageSize, maxLength: device.maxBufferLength)
        var location: [String: (Int, Int)] = [:]
        for t in tensors {
            let i = ranges.firstIndex { $0.contains(t.offset) && t.offset + t.byteCount <= $0.upperBound }!
            location[t.name] = (i, t.offset - ranges[i].lowerBound)
        }
        self.location = location
        buffers = try file.withPageAlignedStorage { base, capacity in
            try ranges.map { r in
                precondition(r.upperBound <= capacity, "a weight view runs past the loaded file")
                guard let b = device.makeBuffer(bytesNoCopy: base + r.lowerBound, length: r.count,
                                                options: .storageModeShared, deallocator: nil) else {
                    throw HarnessError(.outOfMemory, "cannot map \(r.count) bytes of the model into a Metal buffer")
                }
                return b
            }
        }
    }

    /// Byte ranges of the file, in file order: page-aligned, at most `maxLength` long, each
    /// covering whole tensors; consecutive tensors share a range while it stays in the limit.
    static func plan(tensors: [GGUFTensor], pageSize page: Int, maxLength: Int) throws -> [Range<Int>] {
        func down(_ x: Int) -> Int { x / page * page }
        func up(_ x: Int) -> Int { (x + page - 1) / page * page }
        var ranges: [Range<Int>] = []
        var current: Range<Int>?
        for t in tensors.sorted(by: { $0.offset < $1.offset }) {
            let span = down(t.offset)..<up(t.offset + t.byteCount)
            guard span.count <= maxLength else {
                throw HarnessError(.outOfMemory, "tensor \(t.name) spans \(span.count) bytes, over this device's maxBufferLength of \(maxLength)")
            }
            if let c = current, max(c.upperBound, span.upperBound) - c.lowerBound <= maxLength {
                current = c.lowerBound..<max(c.upperBound, span.upperBound)
            } else {
                if let c = current { ranges.append(c) }
                current = span
            }
        }
        if let c = current { ranges.append(c) }
        return ranges
    }

    /// Binds tensor `name` at `index`.
    func bind(_ enc: any MTLComputeCommandEncoder, _ name: String, index: Int) {
        let (b, offset) = location[name]!
        enc.setBuffer(buffers[b], offset: offset, index: index)
    }
}
