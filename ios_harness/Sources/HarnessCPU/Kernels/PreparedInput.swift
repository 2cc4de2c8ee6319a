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
    /// `maxColumns * blocks * 2` vectors: per block, two 16-lane halves.
    let q8: UnsafeMutablePointer<SIMD16<Int16>>
    let q4: UnsafeMutablePointer<SIMD16<Int16>>
    /// `maxColumns * blocks` block scales.
    let scales: UnsafeMutablePointer<Float>
    /// The float columns themselves (for F32 weights), `length` apart.
    private(set) var floats: UnsafePointer<Float>
    private(set) var columns = 0

    init(length: Int, maxColumns: Int) {
        precondition(length % 32 == 0)
        self.length = length
        self.maxColumns = maxColumns
        blocks = length / 32
        q8 = .allocate(capacity: maxColumns * blocks * 2)
        q4 = .allocate(capacity: maxColumns * blocks * 2)
        scales = .allocate(capacity: maxColumns * blocks)
        floats = UnsafePointer(scales)
    }

    deinit {
        q8.deallocate()
        q4.deallocate()
        scales.deallocate()
    }

    /// Prepares `count` columns stored `length` floats apart at `x` for the given weight types.
    func prepare(_ x: UnsafePointer<Float>, count: Int, q8: Bool, q4: Bool) {
        precondition(count <= maxColumns)
        floats = x
        columns = count
        guard q8 || q4 else { return }
        var q = [Int8](repeating: 0, count: 32)
        for c in 0..<count {
            for b in 0..<blocks {
                let src = x + c * length + b * 32
                var amax: Float = 0
                for i in 0..<32 { amax = max(amax, abs(src[i])) }
                let d = amax / 127
                let id: Float = d != 0 ? 1 / d : 0
                for i in 0..<32 { q[i] = Int8((src[i] * id).rounded(.toNearestOrAwayFromZero)) }
                scales[c * blocks + b] = d
                let v = c * blocks * 2 + b * 2
                if q8 {
                    var even = SIMD16<Int16>(), odd = SIMD16<Int16>()
                    for i in 0..<16 {
                        even[i] = Int16(q[2 * i])
                        odd[i] = Int16(q[2 * i + 1])
                    }
                    self.q8[v] = even
                    self.q8[v + 1] = odd
                }
                if q4 {
                    var first = SIMD16<Int16>(), second = SIMD16<Int16>()
                    for i in 0..<8 {
                        first[i] = Int16(q[2 * i])
                        first[i + 8] = Int16(q[16 + 2 * i])
                        second[i] = Int16(q[2 * i + 1])
                        second[i + 8] = Int16(q[17 + 2 * i])
                    }
                    self.q4[v] = first
                    self.q4[v + 1] = second
                }
            }
        }
    }
}
