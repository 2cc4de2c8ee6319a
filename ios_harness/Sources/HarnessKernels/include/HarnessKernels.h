// Int8 dot-product kernels for rawloop-cpu on x86-64 with AVX2: pmaddubsw / pmaddwd do in one
// instruction what Swift's SIMD types need several for (they cannot express these instructions).
// Rows are in the engine's repacked order (all quants, then scales); `ws` holds the row's block
// scales as floats, `x` the input column quantized to int8 in natural order, `xd` its block
// scales. Each output keeps one fixed order: blocks alternate between two 8-lane accumulators
// (even blocks, odd blocks), summed at the end; the four-column kernels run exactly the
// one-column sequence per column, so chunk width never changes a bit.
#ifndef HARNESS_KERNELS_H
#define HARNESS_KERNELS_H

#include <stdint.h>

/// 1 when this build has the AVX2 kernels (x86-64 compiled with AVX2, FMA, F16C), else 0.
int hk_available(void);

/// out[b] = f16 scale b as float, times xd[b] when xd is not NULL (exact product, rounded once).
void hk_row_scales(const uint16_t *scales, long blocks, const float *xd, float *out);

/// One row against one column; `s[b]` = weight scale x input scale of block b (hk_row_scales).
float hk_q8_0_dot1(const uint8_t *row, const float *s, long blocks, const int8_t *x);
void hk_q8_0_dot4(const uint8_t *row, const float *ws, long blocks, const int8_t *x, long x_stride,
                  const float *xd, long d_stride, float *out4);
float hk_q4_0_dot1(const uint8_t *row, const float *s, long blocks, const int8_t *x);
void hk_q4_0_dot4(const uint8_t *row, const float *ws, long blocks, const int8_t *x, long x_stride,
                  const float *xd, long d_stride, float *out4);

#endif
