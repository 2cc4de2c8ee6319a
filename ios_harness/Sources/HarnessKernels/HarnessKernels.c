#include "HarnessKernels.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

int hk_available(void) { return 1; }

// Lanes summed in one fixed order.
static inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

// Exact int32 partial sums of 32 int8 weights x 32 int8 inputs (|w| <= 128, |x| <= 127:
// every pmaddubsw pair sum fits int16 without saturation).
static inline __m256 block_dot(__m256i w, __m256i x) {
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

static inline __m256i q8_weights(const uint8_t *row, long b) {
    return _mm256_loadu_si256((const __m256i *)(row + b * 32));
}

// Block b of a repacked Q4_0 row as 32 int8 values in element order (low nibbles, then high).
static inline __m256i q4_weights(const uint8_t *row, long b) {
    __m128i q = _mm_loadu_si128((const __m128i *)(row + b * 16));
    __m128i m = _mm_set1_epi8(15);
    __m256i w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
    return _mm256_sub_epi8(w, _mm256_set1_epi8(8));
}

void hk_row_scales(const uint16_t *scales, long blocks, const float *xd, float *out) {
    long b = 0;
    for (; b + 8 <= blocks; b += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scales + b)));
        _mm256_storeu_ps(out + b, xd ? _mm256_mul_ps(v, _mm256_loadu_ps(xd + b)) : v);
    }
    for (; b < blocks; b++) {
        float v = _cvtsh_ss(scales[b]);
        out[b] = xd ? v * xd[b] : v;
    }
}

// s[b] is ws[b] * xd[b], the same product the four-column kernels form per column.
#define DOT1(NAME, WEIGHTS)                                                                       \
    float NAME(const uint8_t *row, const float *s, long blocks, const int8_t *x) {               \
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                               \
        long b = 0;                                                                               \
        for (; b + 1 < blocks; b += 2) {                                                          \
            __m256i w0 = WEIGHTS(row, b), w1 = WEIGHTS(row, b + 1);                               \
            a0 = _mm256_fmadd_ps(block_dot(w0, _mm256_loadu_si256((const __m256i *)(x + b * 32))), \
                                 _mm256_broadcast_ss(s + b), a0);                                 \
            a1 = _mm256_fmadd_ps(block_dot(w1, _mm256_loadu_si256((const __m256i *)(x + b * 32 + 32))), \
                                 _mm256_broadcast_ss(s + b + 1), a1);                             \
        }                                                                                         \
        if (b < blocks) {                                                                         \
            a0 = _mm256_fmadd_ps(block_dot(WEIGHTS(row, b), _mm256_loadu_si256((const __m256i *)(x + b * 32))), \
                                 _mm256_broadcast_ss(s + b), a0);                                 \
        }                                                                                         \
        return hsum(_mm256_add_ps(a0, a1));                                                      \
    }

#define COL(c, w, b, acc)                                                                         \
    acc = _mm256_fmadd_ps(block_dot(w, _mm256_loadu_si256((const __m256i *)(x + (c) * x_stride + (b) * 32))), \
                          _mm256_set1_ps(ws[b] * xd[(c) * d_stride + (b)]), acc)

#define DOT4(NAME, WEIGHTS)                                                                       \
    void NAME(const uint8_t *row, const float *ws, long blocks, const int8_t *x, long x_stride,    \
              const float *xd, long d_stride, float *out4) {                                      \
        __m256 e0 = _mm256_setzero_ps(), e1 = e0, e2 = e0, e3 = e0;                              \
        __m256 o0 = e0, o1 = e0, o2 = e0, o3 = e0;                                               \
        long b = 0;                                                                               \
        for (; b + 1 < blocks; b += 2) {                                                          \
            __m256i w0 = WEIGHTS(row, b), w1 = WEIGHTS(row, b + 1);                               \
            COL(0, w0, b, e0); COL(0, w1, b + 1, o0);                                             \
            COL(1, w0, b, e1); COL(1, w1, b + 1, o1);                                             \
            COL(2, w0, b, e2); COL(2, w1, b + 1, o2);                                             \
            COL(3, w0, b, e3); COL(3, w1, b + 1, o3);                                             \
        }                                                                                         \
        if (b < blocks) {                                                                         \
            __m256i w0 = WEIGHTS(row, b);                                                         \
            COL(0, w0, b, e0); COL(1, w0, b, e1); COL(2, w0, b, e2); COL(3, w0, b, e3);           \
        }                                                                                         \
        out4[0] = hsum(_mm256_add_ps(e0, o0));                                                    \
        out4[1] = hsum(_mm256_add_ps(e1, o1));                                                    \
        out4[2] = hsum(_mm256_add_ps(e2, o2));                                                    \
        out4[3] = hsum(_mm256_add_ps(e3, o3));                                                    \
    }

DOT1(hk_q8_0_dot1, q8_weights)
DOT4(hk_q8_0_dot4, q8_weights)
DOT1(hk_q4_0_dot1, q4_weights)
DOT4(hk_q4_0_dot4, q4_weights)

#else
// Other targets (arm64, baseline x86-64) use the Swift kernels; these are never called.
int hk_available(void) { return 0; }
void hk_row_scales(const uint16_t *scales, long blocks, const float *xd, float *out) {
    (void)scales; (void)blocks; (void)xd; (void)out;
}
float hk_q8_0_dot1(const uint8_t *row, const float *s, long blocks, const int8_t *x) {
    (void)row; (void)s; (void)blocks; (void)x; return 0;
}
void hk_q8_0_dot4(const uint8_t *row, const float *ws, long blocks, const int8_t *x, long x_stride,
                  const float *xd, long d_stride, float *out4) {
    (void)row; (void)ws; (void)blocks; (void)x; (void)x_stride; (void)xd; (void)d_stride; (void)out4;
}
float hk_q4_0_dot1(const uint8_t *row, const float *s, long blocks, const int8_t *x) {
    (void)row; (void)s; (void)blocks; (void)x; return 0;
}
void hk_q4_0_dot4(const uint8_t *row, const float *ws, long blocks, const int8_t *x, long x_stride,
                  const float *xd, long d_stride, float *out4) {
    (void)row; (void)ws; (void)blocks; (void)x; (void)x_stride; (void)xd; (void)d_stride; (void)out4;
}
#endif
