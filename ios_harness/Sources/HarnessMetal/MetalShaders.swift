/// The Metal raw loop's kernels, embedded as source: SwiftPM on the command line copies `.metal`
/// files instead of compiling them, so the engine compiles this string once with
/// `makeLibrary(source:options:)` before any timed region.
///
/// The K-order rule of the CPU engine holds here too: every output scalar of a matrix-vector
/// product is computed by one SIMD-group, lane l taking blocks l, l + 32, ... in order, lanes
/// combined by `simd_sum`; the columns of a prefill chunk each run exactly that sequence, so a
/// chunk of M tokens gives the bits of M = 1.
enum MetalShaders {
    static let source = #"""
    #include <metal_stdlib>
    using namespace metal;

    struct MatvecArgs { uint rows; uint cols; uint columns; uint in_stride; uint out_stride; };
    struct NormArgs { uint dim; float eps; uint in_stride; uint out_stride; };
    struct RopeArgs { uint heads; uint head_dim; uint stride; uint p0; float base; };
    struct AttnArgs { uint heads; uint kv_heads; uint head_dim; uint dim; uint kv_dim; uint p0; uint ctx; };
    struct CopyArgs { uint count; uint src_offset; uint dst_offset; };

    // One row of Q8_0 (34-byte blocks: half scale, 32 x int8) against one float column.
    static float row_q8_0(device const uchar *row, uint nb, device const float *x, uint lane) {
        float acc = 0.0f;
        for (uint b = lane; b < nb; b += 32) {
            device const uchar *blk = row + b * 34;
            float d = float(*(device const half *)blk);
            device const char *q = (device const char *)(blk + 2);
            device const float *xb = x + b * 32;
            float s = 0.0f;
            for (uint i = 0; i < 32; i++) { s += float(q[i]) * xb[i]; }
            acc += d * s;
        }
        return simd_sum(acc);
    }

    // One row of Q4_0 (18-byte blocks: half scale, element j low nibble of byte j, j + 16 high).
    static float row_q4_0(device const uchar *row, uint nb, device const float *x, uint lane) {
        float acc = 0.0f;
        for (uint b = lane; b < nb; b += 32) {
            device const uchar *blk = row + b * 18;
            float d = float(*(device const half *)blk);
            device const uchar *q = blk + 2;
            device const float *xb = x + b * 32;
            float s = 0.0f;
            for (uint j = 0; j < 16; j++) {
                s += float(int(q[j] & 15) - 8) * xb[j];
                s += float(int(q[j] >> 4) - 8) * xb[j + 16];
            }
            acc += d * s;
        }
        return simd_sum(acc);
    }

    static float row_f32(device const float *row, uint n, device const float *x, uint lane) {
        float acc = 0.0f;
        for (uint i = lane; i < n; i += 32) { acc += row[i] * x[i]; }
        return simd_sum(acc);
    }

    // out[c * out_stride + r] = row r . column c; one SIMD-group per row, all columns of the chunk.
    #define MATVEC(NAME, ROWBYTES, CALL)                                                              \
    kernel void NAME(device const uchar *w [[buffer(0)]], device const float *x [[buffer(1)]],        \
                     device float *out [[buffer(2)]], constant MatvecArgs &a [[buffer(3)]],           \
                     uint tg [[threadgroup_position_in_grid]],                                       \
                     uint sg [[simdgroup_index_in_threadgroup]],                                     \
                     uint sgs [[simdgroups_per_threadgroup]],                                        \
                     uint lane [[thread_index_in_simdgroup]]) {                                      \
        uint r = tg * sgs + sg;                                                                       \
        if (r >= a.rows) return;                                                                      \
        device const uchar *row = w + (ulong)r * (ROWBYTES);                                          \
        for (uint c = 0; c < a.columns; c++) {                                                        \
            float v = CALL;                                                                           \
            if (lane == 0) { out[c * a.out_stride + r] = v; }                                         \
        }                                                                                             \
    }
    MATVEC(matvec_q8_0, (a.cols / 32) * 34, row_q8_0(row, a.cols / 32, x + c * a.in_stride, lane))
    MATVEC(matvec_q4_0, (a.cols / 32) * 18, row_q4_0(row, a.cols / 32, x + c * a.in_stride, lane))
    MATVEC(matvec_f32, a.cols * 4, row_f32((device const float *)row, a.cols, x + c * a.in_stride, lane))

    // One threadgroup of 32 threads per column: sum of squares in lane order, then simd_sum.
    kernel void rms_norm(device const float *x [[buffer(0)]], device const float *w [[buffer(1)]],
                         device float *out [[buffer(2)]], constant NormArgs &a [[buffer(3)]],
                         uint c [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
        device const float *xc = x + c * a.in_stride;
        float s = 0.0f;
        for (uint i = lane; i < a.dim; i += 32) { s += xc[i] * xc[i]; }
        float scale = 1.0f / sqrt(simd_sum(s) / float(a.dim) + a.eps);
        for (uint i = lane; i < a.dim; i += 32) { out[c * a.out_stride + i] = xc[i] * scale * w[i]; }
    }

    // Adjacent-pair rope (ggml "normal" mode); one thread per (pair, head), grid.y = column.
    kernel void rope(device float *x [[buffer(0)]], constant RopeArgs &a [[buffer(1)]],
                     uint2 gid [[thread_position_in_grid]]) {
        uint half_dim = a.head_dim / 2;
        if (gid.x >= a.heads * half_dim) return;
        uint h = gid.x / half_dim, i = gid.x % half_dim;
        float theta = float(a.p0 + gid.y) * pow(a.base, -2.0f * float(i) / float(a.head_dim));
        device float *p = x + gid.y * a.stride + h * a.head_dim + 2 * i;
        float c = cos(theta), s = sin(theta), x0 = p[0], x1 = p[1];
        p[0] = x0 * c - x1 * s;
        p[1] = x0 * s + x1 * c;
    }

    kernel void copy_floats(device const float *src [[buffer(0)]], device float *dst [[buffer(1)]],
                            constant CopyArgs &a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
        if (i < a.count) { dst[a.dst_offset + i] = src[a.src_offset + i]; }
    }

    kernel void add_into(device float *x [[buffer(0)]], device const float *y [[buffer(1)]],
                         constant uint &n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
        if (i < n) { x[i] = x[i] + y[i]; }
    }

    kernel void silu_mul(device const float *g [[buffer(0)]], device const float *u [[buffer(1)]],
                         device float *h [[buffer(2)]], constant uint &n [[buffer(3)]],
                         uint i [[thread_position_in_grid]]) {
        if (i < n) { float v = g[i]; h[i] = v / (1.0f + exp(-v)) * u[i]; }
    }

    // One SIMD-group per (head, column): scores over positions 0...p0 + column by lane, softmax
    // with simd_max / simd_sum, then each output dimension sums positions in order.
    kernel void attention(device const float *q [[buffer(0)]], device const float *keys [[buffer(1)]],
                          device const float *values [[buffer(2)]], device float *scores [[buffer(3)]],
                          device float *out [[buffer(4)]], constant AttnArgs &a [[buffer(5)]],
                          uint2 tg [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
        uint h = tg.x, c = tg.y, pos = a.p0 + c;
        uint kv = h / (a.heads / a.kv_heads);
        device const float *qh = q + c * a.dim + h * a.head_dim;
        device float *sc = scores + (c * a.heads + h) * a.ctx;
        float scale = 1.0f / sqrt(float(a.head_dim));
        float best = -INFINITY;
        for (uint t = lane; t <= pos; t += 32) {
            device const float *k = keys + t * a.kv_dim + kv * a.head_dim;
            float s = 0.0f;
            for (uint i = 0; i < a.head_dim; i++) { s += qh[i] * k[i]; }
            s *= scale;
            sc[t] = s;
            best = max(best, s);
        }
        best = simd_max(best);
        float total = 0.0f;
        for (uint t = lane; t <= pos; t += 32) { float e = exp(sc[t] - best); sc[t] = e; total += e; }
        total = simd_sum(total);
        simdgroup_barrier(mem_flags::mem_device);
        float inv = 1.0f / total;
        for (uint i = lane; i < a.head_dim; i += 32) {
            float o = 0.0f;
            for (uint t = 0; t <= pos; t++) { o += sc[t] * inv * values[t * a.kv_dim + kv * a.head_dim + i]; }
            out[c * a.dim + h * a.head_dim + i] = o;
        }
    }
    """#
}
