// The tile kernels of mla_paged_decode (mla.cpp), per instruction set: a tile's scores for every head,
// S[j][h] = rows[j] . qT[:, h] (qT: the scaled query, transposed to [W][Hp] so heads run across vector
// lanes), and its softmax-weighted rows summed into the output, acc[h][0:R] += sum_j P[j][h] rows[j][0:R].
// Each score and each sum is one FMA chain in a fixed order whatever the block or the level's form, so
// a sequence's result never depends on how its rows lie in the pool or on its batchmates.
#pragma once
#include "k3.h"

namespace k3 {

namespace {

// score_tile / accumulate_tile on 16-lane vectors: Hp a multiple of 16, 16 or 8 rows (scores) or 4 or 2
// heads x 64 values over the tile's rows (accumulation) per block; the callers handle what is left with
// the 8-lane or scalar forms.
// S[j][h] for Rows rows, all Hp heads (a multiple of 16 Groups): value(j, k) reads row j's k-th value;
// ahead (or nullptr), the next rows' bytes to prefetch, a line per step of the first head groups. Groups
// head vectors share each broadcast row value: 2 groups of 8 rows load 10 values per 16 FMAs, 1 group of
// 16 rows loads 17.
template <int Rows, int Groups, class Value>
K3_AVX512 inline void score_rows_avx512(Value value, const char* ahead, const float* qT, int64_t W, int64_t Hp,
                                        float* S) {
  for (int64_t g = 0; g < Hp; g += 16 * Groups) {
    __m512 a[Groups][Rows];
    for (int e = 0; e < Groups; ++e)
      for (int j = 0; j < Rows; ++j) a[e][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < W; ++k) {
      if (ahead != nullptr && g == 0 && k * 16 < Rows * W) _mm_prefetch(ahead + k * 64, _MM_HINT_T1);
      __m512 qv[Groups];
      for (int e = 0; e < Groups; ++e) qv[e] = _mm512_loadu_ps(qT + k * Hp + g + 16 * e);
      for (int j = 0; j < Rows; ++j) {
        const __m512 v = _mm512_set1_ps(value(j, k));
        for (int e = 0; e < Groups; ++e) a[e][j] = _mm512_fmadd_ps(v, qv[e], a[e][j]);
      }
    }
    for (int e = 0; e < Groups; ++e)
      for (int j = 0; j < Rows; ++j) _mm512_storeu_ps(S + j * Hp + g + 16 * e, a[e][j]);
  }
}

inline bool packed_rows(const float* const* rows, int64_t n, int64_t W) {
  for (int64_t j = 1; j < n; ++j)
    if (rows[j] != rows[0] + j * W) return false;
  return true;
}

// The bytes to prefetch while rows [j0, j0 + n) are scored: the same rows of the next tile, when `ahead`
// (the next tile's row pointers, or nullptr) has them laid out one after another; else nullptr.
inline const char* prefetch_target(const float* const* ahead, int64_t j0, int64_t n, int64_t W) {
  if (ahead == nullptr || ahead[j0] == nullptr || ahead[j0 + n - 1] == nullptr || !packed_rows(ahead + j0, n, W))
    return nullptr;
  return reinterpret_cast<const char*>(ahead[j0]);
}

// Rows in 16-row groups laid out one after another with W known when compiled: one base pointer and
// constant offsets (16 row pointers do not fit the general registers, and their spills cost a move per
// FMA). K3's latent rows are 576 wide (512 + 64). Each group prefetches the next tile's same rows into L2
// as it is scored, a tile ahead, so the fetch overlaps this tile's scores and sums (the rows were not
// fetched ahead otherwise; read a column at a time across the rows, hardware prefetch does not see them).
// More than 16 heads: 8 rows and two head vectors per pass (fewer loads per FMA).
K3_AVX512 int64_t score_tile_avx512(const float* const* rows, const float* const* ahead, int64_t nt, const float* qT,
                                    int64_t W, int64_t Hp, float* S) {
  constexpr int64_t kK3Width = 576;
  int64_t j0 = 0;
  if (Hp % 32 == 0) {
    for (; j0 + 8 <= nt; j0 += 8) {
      const float* const* r = rows + j0;
      score_rows_avx512<8, 2>([r](int j, int64_t k) { return r[j][k]; }, prefetch_target(ahead, j0, 8, W), qT, W, Hp,
                              S + j0 * Hp);
    }
    return j0;
  }
  if (W == kK3Width)
    for (; j0 + 16 <= nt && packed_rows(rows + j0, 16, W); j0 += 16) {
      const float* r = rows[j0];
      score_rows_avx512<16, 1>([r](int j, int64_t k) { return r[j * kK3Width + k]; },
                               prefetch_target(ahead, j0, 16, W), qT, kK3Width, Hp, S + j0 * Hp);
    }
  for (; j0 + 8 <= nt; j0 += 8) {
    const float* const* r = rows + j0;
    score_rows_avx512<8, 1>([r](int j, int64_t k) { return r[j][k]; }, prefetch_target(ahead, j0, 8, W), qT, W, Hp,
                            S + j0 * Hp);
  }
  return j0;
}

// acc[h .. h + Heads) [r, r + 64) += sum_j P[j][h'] rows[j][r, r + 64).
template <int Heads>
K3_AVX512 void accumulate_block_avx512(const float* const* rows, int64_t nt, const float* P, int64_t Hp, int64_t h,
                                       int64_t R, int64_t r, float* acc) {
  __m512 b[Heads][4];
  for (int e = 0; e < Heads; ++e)
    for (int i = 0; i < 4; ++i) b[e][i] = _mm512_loadu_ps(acc + (h + e) * R + r + 16 * i);
  for (int64_t j = 0; j < nt; ++j) {
    const float* row = rows[j] + r;
    __m512 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm512_loadu_ps(row + 16 * i);
    for (int e = 0; e < Heads; ++e) {
      const __m512 p = _mm512_set1_ps(P[j * Hp + h + e]);
      for (int i = 0; i < 4; ++i) b[e][i] = _mm512_fmadd_ps(p, v[i], b[e][i]);
    }
  }
  for (int e = 0; e < Heads; ++e)
    for (int i = 0; i < 4; ++i) _mm512_storeu_ps(acc + (h + e) * R + r + 16 * i, b[e][i]);
}

// Columns outer, heads inner (4 at a time, then pairs): the tile's 64 columns of its rows (4 KB at 16
// rows) stay in L1 while every head block reads them (rows outer had all 16 rows' columns and all heads'
// sums, 64 KB, cycling through L1 for each block). Each sum's FMA chain over the rows is the same either way.
K3_AVX512 int64_t accumulate_tile_avx512(const float* const* rows, int64_t nt, const float* P, int64_t Hp, int64_t H,
                                         int64_t R, float* acc) {
  const int64_t H2 = H / 2 * 2, H4 = H / 4 * 4;
  for (int64_t r = 0; r + 64 <= R; r += 64) {
    for (int64_t h = 0; h < H4; h += 4) accumulate_block_avx512<4>(rows, nt, P, Hp, h, R, r, acc);
    for (int64_t h = H4; h < H2; h += 2) accumulate_block_avx512<2>(rows, nt, P, Hp, h, R, r, acc);
  }
  for (int64_t h = 0; h < H2; h += 2) {
    float* y0 = acc + h * R;
    float* y1 = y0 + R;
    for (int64_t r = R / 64 * 64; r < R; ++r)
      for (int64_t j = 0; j < nt; ++j) {
        y0[r] += P[j * Hp + h] * rows[j][r];
        y1[r] += P[j * Hp + h + 1] * rows[j][r];
      }
  }
  return H2;
}

#ifdef __AVX2__
// The 8-lane form of score_rows_avx512 (16 registers: 4 rows x 2 head vectors, or 8 rows x 1).
template <int Rows, int Groups>
inline void score_rows_avx2(const float* const* rows, const char* ahead, const float* qT, int64_t W, int64_t Hp,
                            float* S) {
  for (int64_t g = 0; g < Hp; g += 8 * Groups) {
    __m256 a[Groups][Rows];
    for (int e = 0; e < Groups; ++e)
      for (int j = 0; j < Rows; ++j) a[e][j] = _mm256_setzero_ps();
    for (int64_t k = 0; k < W; ++k) {
      if (ahead != nullptr && g == 0 && k * 16 < Rows * W) _mm_prefetch(ahead + k * 64, _MM_HINT_T1);
      __m256 qv[Groups];
      for (int e = 0; e < Groups; ++e) qv[e] = _mm256_loadu_ps(qT + k * Hp + g + 8 * e);
      for (int j = 0; j < Rows; ++j) {
        const __m256 v = _mm256_broadcast_ss(rows[j] + k);
        for (int e = 0; e < Groups; ++e) a[e][j] = _mm256_fmadd_ps(v, qv[e], a[e][j]);
      }
    }
    for (int e = 0; e < Groups; ++e)
      for (int j = 0; j < Rows; ++j) _mm256_storeu_ps(S + j * Hp + g + 8 * e, a[e][j]);
  }
}
#endif

// S[j][h] = rows[j] . qT[:, h] for j < nt, all Hp heads: heads run across vector lanes, so no
// horizontal sums; several rows at a time give independent accumulators per head vector, and two head
// vectors (when there are) share each broadcast row value. ahead: the next tile's rows (see
// prefetch_target).
void score_tile(const float* const* rows, const float* const* ahead, int64_t nt, const float* qT, int64_t W, int64_t Hp,
                float* S) {
  int64_t j0 = g_simd >= 2 && Hp % 16 == 0 ? score_tile_avx512(rows, ahead, nt, qT, W, Hp, S) : 0;
#ifdef __AVX2__
  if (g_simd >= 1 && Hp % 16 == 0)
    for (; j0 + 4 <= nt; j0 += 4)
      score_rows_avx2<4, 2>(rows + j0, prefetch_target(ahead, j0, 4, W), qT, W, Hp, S + j0 * Hp);
  if (g_simd >= 1)
    for (; j0 + 8 <= nt; j0 += 8)
      score_rows_avx2<8, 1>(rows + j0, prefetch_target(ahead, j0, 8, W), qT, W, Hp, S + j0 * Hp);
#endif
  for (int64_t j = j0; j < nt; ++j)
    for (int64_t h = 0; h < Hp; ++h) {
      float t = 0.f;
      for (int64_t k = 0; k < W; ++k) t += rows[j][k] * qT[k * Hp + h];
      S[j * Hp + h] = t;
    }
}

// acc[h][0:R] += sum_j P[j][h] rows[j][0:R] for the H real heads; 2 heads x 32 values per block.
void accumulate_tile(const float* const* rows, int64_t nt, const float* P, int64_t Hp, int64_t H, int64_t R, float* acc) {
  int64_t h = g_simd >= 2 ? accumulate_tile_avx512(rows, nt, P, Hp, H, R, acc) : 0;
#ifdef __AVX2__
  if (g_simd >= 1) {
    for (; h + 2 <= H; h += 2) {
      float* y0 = acc + h * R;
      float* y1 = y0 + R;
      int64_t r = 0;
      for (; r + 32 <= R; r += 32) {
        __m256 b0 = _mm256_loadu_ps(y0 + r), b1 = _mm256_loadu_ps(y0 + r + 8), b2 = _mm256_loadu_ps(y0 + r + 16),
               b3 = _mm256_loadu_ps(y0 + r + 24), c0 = _mm256_loadu_ps(y1 + r), c1 = _mm256_loadu_ps(y1 + r + 8),
               c2 = _mm256_loadu_ps(y1 + r + 16), c3 = _mm256_loadu_ps(y1 + r + 24);
        for (int64_t j = 0; j < nt; ++j) {
          const float* row = rows[j] + r;
          const __m256 p0 = _mm256_broadcast_ss(P + j * Hp + h), p1 = _mm256_broadcast_ss(P + j * Hp + h + 1);
          const __m256 v0 = _mm256_loadu_ps(row), v1 = _mm256_loadu_ps(row + 8), v2 = _mm256_loadu_ps(row + 16),
                       v3 = _mm256_loadu_ps(row + 24);
          b0 = _mm256_fmadd_ps(p0, v0, b0), b1 = _mm256_fmadd_ps(p0, v1, b1), b2 = _mm256_fmadd_ps(p0, v2, b2);
          b3 = _mm256_fmadd_ps(p0, v3, b3), c0 = _mm256_fmadd_ps(p1, v0, c0), c1 = _mm256_fmadd_ps(p1, v1, c1);
          c2 = _mm256_fmadd_ps(p1, v2, c2), c3 = _mm256_fmadd_ps(p1, v3, c3);
        }
        _mm256_storeu_ps(y0 + r, b0), _mm256_storeu_ps(y0 + r + 8, b1), _mm256_storeu_ps(y0 + r + 16, b2);
        _mm256_storeu_ps(y0 + r + 24, b3), _mm256_storeu_ps(y1 + r, c0), _mm256_storeu_ps(y1 + r + 8, c1);
        _mm256_storeu_ps(y1 + r + 16, c2), _mm256_storeu_ps(y1 + r + 24, c3);
      }
      for (; r < R; ++r)
        for (int64_t j = 0; j < nt; ++j) {
          y0[r] += P[j * Hp + h] * rows[j][r];
          y1[r] += P[j * Hp + h + 1] * rows[j][r];
        }
    }
  }
#endif
  for (; h < H; ++h)
    for (int64_t j = 0; j < nt; ++j) {
      const float p = P[j * Hp + h];
      for (int64_t r = 0; r < R; ++r) acc[h * R + r] += p * rows[j][r];
    }
}

}  // namespace

}  // namespace k3
