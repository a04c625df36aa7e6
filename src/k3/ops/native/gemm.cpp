// bf16_gemm:  y [M, N] = x [M, K] fp32 @ w [N, K] bf16 ^T, for prefill-sized M.
// mxfp4_gemm: the same for W packed MXFP4 ([N, K/2] codes, [N, K/32] E8M0 scales).
//
// A blocked GEMM in the BLIS shape: for each block of kGemmDepth columns of K, x's rows are packed in
// tiles of R ([depth][R]) and each panel of C weight rows is widened (bf16) or decoded (MXFP4, exactly)
// and transposed as it is packed ([depth][C], in L1), so the weight becomes fp32 once per use instead of
// into a full fp32 copy first (fresh memory, costly to fault in and write). The micro-kernel keeps
// R x C accumulators in registers: one broadcast of x and C / lanes FMAs per row and k. AVX2: R = 6,
// C = 16 (12 of its 16 registers); AVX-512: R = 12, C = 32 (24 of its 32).
//
// Every output is summed the same way whatever M, N, the thread count or the instruction set: within a
// depth block, one FMA chain over k in order (one vector lane per output); the blocks' sums added to y in
// order. So a row's result never depends on its batch, and AVX2 and AVX-512 give the same bits.
// A whole prefill ran faster this way than with the weight widened for MKL's sgemm on every CPU measured,
// MKL's own AVX-512 code on Intel included (benchmarks/prefill_gemm.py). Used where
// k3.ops.native.prefill_gemm() says.
#include "k3.h"
#include "gemm_pack.h"

namespace k3 {

namespace {

// y rows [0, R) x columns [0, cols) (row stride ldc) = (first ? 0 : y) + packed rows x panel over kc;
// the AVX2 tile (C = 16), or plain C++ with the same per-output FMA chains.
template <int R>
void gemm_micro(const float* rows, const float* panel, int64_t kc, float* y, int64_t ldc, int cols, bool first) {
  constexpr int C = Avx2Tile::C;
#ifdef __AVX2__
  if (g_simd >= 1) {
    __m256 acc[R][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
      const __m256 b0 = _mm256_loadu_ps(panel + k * C), b1 = _mm256_loadu_ps(panel + k * C + 8);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 a = _mm256_broadcast_ss(rows + k * R + r);
        acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
      }
    }
    // Unrolled, so the accumulators stay registers: with a loop over r here GCC kept a copy of all 12
    // in memory, stored on every k.
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m256 lo = acc[r][0], hi = acc[r][1];
      float* row = y + r * ldc;
      if (cols == C) {
        if (!first) lo = _mm256_add_ps(_mm256_loadu_ps(row), lo), hi = _mm256_add_ps(_mm256_loadu_ps(row + 8), hi);
        _mm256_storeu_ps(row, lo);
        _mm256_storeu_ps(row + 8, hi);
      } else {
        alignas(32) float t[C];
        _mm256_store_ps(t, lo);
        _mm256_store_ps(t + 8, hi);
        for (int j = 0; j < cols; ++j) row[j] = first ? t[j] : row[j] + t[j];
      }
    }
    return;
  }
#endif
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < cols; ++j) {
      float s = 0.f;
      for (int64_t k = 0; k < kc; ++k) s = std::fma(rows[k * R + r], panel[k * C + j], s);
      y[r * ldc + j] = first ? s : y[r * ldc + j] + s;
    }
}

// The AVX-512 tile (C = 32): the same per-output chains, 16 outputs a vector. Columns past `cols` are
// masked off in the loads and stores of y.
template <int R>
K3_AVX512 void gemm_micro_avx512(const float* rows, const float* panel, int64_t kc, float* y, int64_t ldc, int cols,
                                 bool first) {
  constexpr int C = Avx512Tile::C;
  __m512 acc[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(panel + k * C), b1 = _mm512_loadu_ps(panel + k * C + 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(rows[k * R + r]);
      acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
    }
  }
  const __mmask16 lo_mask = cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << cols) - 1);
  const __mmask16 hi_mask = cols >= 32 ? 0xFFFF : cols > 16 ? static_cast<__mmask16>((1u << (cols - 16)) - 1) : 0;
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
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

template <class Tile, int R>
inline void micro(const float* rows, const float* panel, int64_t kc, float* y, int64_t ldc, int cols, bool first) {
  if constexpr (Tile::C == Avx512Tile::C)
    gemm_micro_avx512<R>(rows, panel, kc, y, ldc, cols, first);
  else
    gemm_micro<R>(rows, panel, kc, y, ldc, cols, first);
}

// The last `left` (< R) rows: the micro-kernel for exactly that many.
template <class Tile, int R>
inline void micro_tail(int left, const float* rows, const float* panel, int64_t kc, float* y, int64_t ldc, int cols,
                       bool first) {
  if constexpr (R > 0) {
    if (left == R) return micro<Tile, R>(rows, panel, kc, y, ldc, cols, first);
    micro_tail<Tile, R - 1>(left, rows, panel, kc, y, ldc, cols, first);
  }
}

// One panel (C outputs) of one depth block for every row of x.
template <class Tile>
void gemm_panel(const float* packed_rows, int64_t M, int64_t kc, const float* panel, float* y, int64_t N, int cols,
                bool first) {
  int64_t m = 0;
  for (; m + Tile::R <= M; m += Tile::R)
    micro<Tile, Tile::R>(packed_rows + m * kc, panel, kc, y + m * N, N, cols, first);
  if (m < M)
    micro_tail<Tile, Tile::R - 1>(static_cast<int>(M - m), packed_rows + m * kc, panel, kc, y + m * N, N, cols, first);
}

// y [M, N] = x [M, K] @ w^T, each depth block of x packed once, the panels split over threads.
template <class Tile, class Weights>
void gemm_tiled(const float* x, const Weights& w, int64_t M, int64_t K, int64_t N, float* y) {
  constexpr int R = Tile::R, C = Tile::C;
  if (K == 0) return std::fill(y, y + M * N, 0.f);   // an empty sum: no depth block would write y
  const int64_t panels = (N + C - 1) / C;
  std::vector<float> packed_rows(M * std::min(K, kGemmDepth));
#pragma omp parallel
  {
    std::vector<float> panel(kGemmDepth * C);
    for (int64_t k0 = 0; k0 < K; k0 += kGemmDepth) {
      const int64_t kc = std::min(kGemmDepth, K - k0);
#pragma omp for schedule(static)
      for (int64_t m = 0; m < M; m += R)
        pack_rows(x, K, m, static_cast<int>(std::min<int64_t>(R, M - m)), k0, kc, packed_rows.data() + m * kc);
#pragma omp for schedule(static)
      for (int64_t p = 0; p < panels; ++p) {
        const int64_t n0 = p * C;
        pack_panel<C>(w, N, n0, k0, kc, panel.data());
        gemm_panel<Tile>(packed_rows.data(), M, kc, panel.data(), y + n0, N,
                         static_cast<int>(std::min<int64_t>(C, N - n0)), k0 == 0);
      }
    }
  }
}

template <class Weights>
void gemm(const float* x, const Weights& w, int64_t M, int64_t K, int64_t N, float* y) {
  if (g_simd >= 2)
    gemm_tiled<Avx512Tile>(x, w, M, K, N, y);
  else
    gemm_tiled<Avx2Tile>(x, w, M, K, N, y);
}

}  // namespace

at::Tensor bf16_gemm(at::Tensor x, at::Tensor w) { return gemm_product(x, bf16_weights(w), w.size(0), gemm<Bf16Weights>); }

at::Tensor mxfp4_gemm(at::Tensor x, at::Tensor packed, at::Tensor scale) {
  return gemm_product(x, mxfp4_weights(packed, scale), packed.size(0), gemm<Mxfp4Weights>);
}

}  // namespace k3
