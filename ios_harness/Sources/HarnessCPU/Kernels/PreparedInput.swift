/// Input columns prepared once per matrix-vector product, shared by every thread and row.
///
/// Q8_0 and Q4_0 rows are dotted against the input quantized to int8 per 32-element block
/// (scale = amax / 127, round half away from zero), with the int8 values pre-widened to int16
/// in the lane order each weight format unpacks into (see `Q8_0Kernel`, `Q4_0Kernel`).
/// Each column is prepared by the same code whatever the chunk width, so a column's dot products
/// do not depend on which other columns share the chunk.
final class PreparedInput {
    let maxColumns: Int
    let length: Int
    let blocks: Int
    /// Q8_0 layout: `blocks * 2` vectors per column (even, odd elements of each block).
    let q8: UnsafeMutablePointer<SIMD16<Int16>>
    /// Q4_0 layout: `pairs * 5` vectors per column, see `Q4_0Kernel`.
    let q4: UnsafeMutablePointer<SIMD16<Int16>>
    /// The int8 values in natural order, `length` per column (the C kernels' input).
    let i8: UnsafeMutablePointer<Int8>
    /// `scaleStride` block scales per column (zero past the last block).
    let scales: UnsafeMutablePointer<Float>
    let pairs: Int
    let scaleStride: Int
    var q8Stride: Int { blocks * 2 }
    var q4Stride: Int { pairs * 5 }
    /// The float columns themselves (for F32 weights), `length` apart.
    private(set) var floats: UnsafePointer<Float>
    private(set) var columns = 0

    init(length: Int, maxColumns: Int) {
        precondition(length % 32 == 0)
        self.length = length
        self.maxColumns = maxColumns
        blocks = length / 32
        pairs = (blocks + 1) / 2
        scaleStride = pairs * 2
        q8 = .allocate(capacity: maxColumns * blocks * 2)
        q4 = .allocate(capacity: maxColumns * pairs * 5)
        q4.initialize(repeating: SIMD16(), count: maxColumns * pairs * 5)
        i8 = .allocate(capacity: maxColumns * length)
        scales = .allocate(capacity: maxColumns * scaleStride)
        scales.initialize(repeating: 0, count: maxColumns * scaleStride)
        floats = UnsafePointer(scales)
    }

    deinit {
        q8.deallocate()
        q4.deallocate()
        i8.deallocate()
        scales.deallocate()
    }

    /// Prepares `count` columns stored `length` floats apart at `x` for the given weight types.
    func prepare(_ x: UnsafePointer<Float>, count: Int, q8: Bool, q4: Bool, plain: Bool = false) {
        precondition(count <= maxColumns)
        floats = x
        columns = count
        guard q8 || q4 || plain else { return }
        let q8p = UnsafeMutableRawPointer(self.q8).assumingMemoryBound(to: Int16.self)
        let q4p = UnsafeMutableRawPointer(self.q4).assumingMemoryBound(to: Int16.self)
        withUnsafeTemporaryAllocation(of: Int16.self, capacity: 32) { buffer in
            let q = buffer.baseAddress!
            for c in 0..<count {
                for b in 0..<blocks {
                    let src = x + (c &* length &+ b &* 32)
                    var amax: Float = 0
                    for i in 0..<32 { amax = max(amax, abs(src[i])) }
                    let d = amax / 127
                    let id: Float = d != 0 ? 1 / d : 0
                    // |src * id| <= 127: the conversion cannot overflow.
                    for i in 0..<32 { q[i] = Int16(unsafe: (src[i] * id).rounded(.toNearestOrAwayFromZero)) }
                    scales[c &* scaleStride &+ b] = d
                    if plain {
                        let v = i8 + (c &* length &+ b &* 32)
                        for i in 0..<32 { v[i] = Int8(truncatingIfNeeded: q[i]) }
                    }
                    if q8 {
                        let v = q8p + (c &* blocks &* 2 &+ b &* 2) &* 16
                        for i in 0..<16 {
                            v[i] = q[2 &* i]
                            v[16 &+ i] = q[2 &* i &+ 1]
                        }
                    }
                    if q4 {
                        // Lanes 0-7 for an even block, 8-15 for an odd one.
                        let g = q4p + ((c &* pairs &* 5 &+ (b &>> 1) &* 5) &* 16 &+ (b & 1) &* 8)
                        for i in 0..<8 {
                            let e = q[2 &* i], e16 = q[16 &+ 2 &* i], o = q[2 &* i &+ 1], o16 = q[17 &+ 2 &* i]
                            g[i] = e
                            g[16 &+ i] = e16
                            g[32 &+ i] = o
                            g[48 &+ i] = o16
                            g[64 &+ i] = -8 &* (e &+ e16 &+ o &+ o16)
                        }
                    }
                }
            }
        }
    }
}

extension Int16 {
    /// A float known to be integral and in range, without the overflow check.
    @inline(__always)
    init(unsafe value: Float) {
        self = Int16(truncatingIfNeeded: Int32(value))
    }
}
