// bf16_dot_gemm:  y [M, N] = bf16(x) [M, K] @ w [N, K] bf16 ^T on the bf16 dot-product units (AVX512_BF16's
//                 vdpbf16ps), for prefill-sized M: x's values are rounded to bf16 (to nearest, ties to even);
//                 every product of two bf16 values is exact in fp32 and summed in fp32.
// mxfp4_dot_gemm: the same for W packed MXFP4 (its values are exact in bf16, so only x is rounded).
//
// The blocked GEMM of gemm.cpp (the same depth blocks, threads and weight panels), with pairs of adjacent
// columns as the unit: x's rows are packed as bf16 pairs ([depth / 2][R] 32-bit words) and each weight
// panel, widened or decoded as gemm.cpp packs it, is narrowed to pairs too ([depth / 2][C]); one vdpbf16ps
// then adds two products to each of 16 outputs, twice the multiply-adds of an fp32 FMA per instruction.
// R = 12 rows by C = 32 outputs: 24 accumulators of the 32 registers. Each output is one chain of
// vdpbf16ps over the pairs in order within a depth block, the blocks added to y in order, so a row's result
// never depends on its batch. The instruction flushes subnormal inputs and results to zero.
//
// Where the CPU has no AVX512_BF16 (or the level is below AVX-512) the same product runs as x rounded to
// bf16 through gemm.cpp's fp32 GEMM: equal within rounding (the sums' order differs), never a crash.
// Chosen by k3.ops.native.prefill_gemm() == "bf16-dot" (an opt-in: x is rounded; docs/design/precision.md).
#include "k3.h"
#include "gemm_pack.h"

#define K3_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))

namespace k3 {

namespace {

constexpr int kDotR = 12, kDotC = 32;

// fp32 -> bf16 bits, to nearest with ties to even (NaN stays a quiet NaN), as ATen's conversion rounds.
inline uint32_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16) | 0x40u;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

// x rows [m, m + rows) (rows <= R) x columns [k0, k0 + kc) rounded to bf16, as pairs [ceil(kc / 2)][R];
// a missing last column and the rows past `rows` are zeros.
void pack_row_pairs(const float* x, int64_t K, int64_t m, int rows, int64_t k0, int64_t kc, uint32_t* out) {
  const int64_t pairs = (kc + 1) / 2;
  for (int r = 0; r < kDotR; ++r) {
    const float* row = x + (m + r) * K + k0;
    for (int64_t p = 0; p < pairs; ++p) {
      const uint32_t lo = r < rows ? bf16_bits(row[2 * p]) : 0u;
      const uint32_t hi = r < rows && 2 * p + 1 < kc ? bf16_bits(row[2 * p + 1]) : 0u;
      out[p * kDotR + r] = lo | (hi << 16);
    }
  }
}

// A packed fp32 panel [kc][C] whose values are bf16 already (widened bf16, decoded MXFP4) as pairs
// [ceil(kc / 2)][C]: the top 16 bits of each value, exactly.
void panel_pairs(const float* panel, int64_t kc, uint32_t* out) {
  for (int64_t p = 0; p < (kc + 1) / 2; ++p)
    for (int c = 0; c < kDotC; ++c) {
      uint32_t lo, hi = 0;
      std::memcpy(&lo, panel + 2 * p * kDotC + c, 4);
      if (2 * p + 1 < kc) std::memcpy(&hi, panel + (2 * p + 1) * kDotC + c, 4);
      out[p * kDotC + c] = (lo >> 16) | (hi & 0xFFFF0000u);
    }
}

// y rows [0, rows) x columns [0, cols) (row stride ldc) = (first ? 0 : y) + row pairs x panel pairs.
K3_AVX512_BF16 void dot_micro(const uint32_t* rows_in, const uint32_t* panel, int64_t pairs, float* y, int64_t ldc,
                              int rows, int cols, bool first) {
  __m512 acc[kDotR][2];
#pragma GCC unroll 12
  for (int r = 0; r < kDotR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(panel + p * kDotC);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(panel + p * kDotC + 16);
#pragma GCC unroll 12
    for (int r = 0; r < kDotR; ++r) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(rows_in[p * kDotR + r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
    }
  }
  const __mmask16 lo_mask = cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << cols) - 1);
  const __mmask16 hi_mask = cols >= 32 ? 0xFFFF : cols > 16 ? static_cast<__mmask16>((1u << (cols - 16)) - 1) : 0;
#pragma GCC unroll 12
  for (int r = 0; r < kDotR; ++r) {
    if (r >= rows) break;
    __m512 lo = acc[r][0], hi = acc[r][1];
    float* row = y + r * ldc;
    if (!first) {
      lo = _mm512_add_ps(_mm512_maskz_loadu_ps(lo_mask, row), lo);
      hi = _mm512_add_ps(_mm512_maskz_loadu_ps(hi_mask, row + 16), hi);
    }
    _mm512_mask_storeu_ps(row, lo_mask, lo);
    _mm512_mask_storeu_ps(row + 16, hi_mask, hi);
  }
}

// y [M, N] = bf16(x) [M, K] @ w^T: each depth block of x packed once as pairs, the panels split over threads.
template <class Weights>
void dot_gemm(const float* x, const Weights& w, int64_t M, int64_t K, int64_t N, float* y) {
  if (K == 0) return std::fill(y, y + M * N, 0.f);
  const int64_t panels = (N + kDotC - 1) / kDotC, tiles = (M + kDotR - 1) / kDotR, depth_pairs = kGemmDepth / 2;
  std::vector<uint32_t> packed_rows(tiles * kDotR * depth_pairs);
#pragma omp parallel
  {
    std::vector<float> panel(kGemmDepth * kDotC);
    std::vector<uint32_t> pairs(depth_pairs * kDotC);
    for (int64_t k0 = 0; k0 < K; k0 += kGemmDepth) {
      const int64_t kc = std::min(kGemmDepth, K - k0), kp = (kc + 1) / 2;
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tiles; ++t)
        pack_row_pairs(x, K, t * kDotR, static_cast<int>(std::min<int64_t>(kDotR, M - t * kDotR)), k0, kc,
                       packed_rows.data() + t * kDotR * kp);
#pragma omp for schedule(static)
      for (int64_t p = 0; p < panels; ++p) {
        const int64_t n0 = p * kDotC;
        pack_panel<kDotC>(w, N, n0, k0, kc, panel.data());
        panel_pairs(panel.data(), kc, pairs.data());
        const int cols = static_cast<int>(std::min<int64_t>(kDotC, N - n0));
        for (int64_t t = 0; t < tiles; ++t)
          dot_micro(packed_rows.data() + t * kDotR * kp, pairs.data(), kp, y + t * kDotR * N + n0, N,
                    static_cast<int>(std::min<int64_t>(kDotR, M - t * kDotR)), cols, k0 == 0);
      }
    }
  }
}

// Whether vdpbf16ps runs here: the AVX-512 level, on a CPU with AVX512_BF16.
bool dot_units() { return g_simd >= 2 && g_bf16_dot; }

// x rounded to bf16 and widened back: the product the fp32 GEMMs then take (no dot-product units here).
at::Tensor rounded(const at::Tensor& x) { return x.to(at::kBFloat16).to(at::kFloat).contiguous(); }

}  // namespace

at::Tensor bf16_dot_gemm(at::Tensor x, at::Tensor w) {
  if (!dot_units()) return bf16_gemm(rounded(x), w);
  return gemm_product(x, bf16_weights(w), w.size(0), dot_gemm<Bf16Weights>);
}

at::Tensor mxfp4_dot_gemm(at::Tensor x, at::Tensor packed, at::Tensor scale) {
  if (!dot_units()) return mxfp4_gemm(rounded(x), packed, scale);
  return gemm_product(x, mxfp4_weights(packed, scale), packed.size(0), dot_gemm<Mxfp4Weights>);
}

}  // namespace k3
