// bf16_linear:     y[n, o] = sum_k x[n, k] w[o, k]            x fp32 [N, K], w bf16 [O, K]
// bf16_head_linear: per head h, y[n, h, r] = sum_c w[h, r, c] x[n, h, c]   (transpose false)
//                              y[n, h, c] = sum_r w[h, r, c] x[n, h, r]   (transpose true)
//                   x fp32 [N, H, in], w bf16 [H, R, C] with contiguous rows (any head/row strides):
//                   MLA's absorbed decode multiplies by both halves of kv_b_proj without widening them.
#include "k3.h"

namespace k3 {

namespace {

// Every output y[n, o] is summed the same way whatever the tile it falls in: one 8-lane (AVX2) or
// 16-lane (AVX-512) accumulator over k, a horizontal sum, then the tail in order. So a row's result never
// depends on how many rows share the call (batch invariance), while tiles of NO outputs x NN rows
// reuse each widened weight vector NN times and each activation vector NO times.
//
// The weights are widened without a shuffle: a 32-bit lane holding bf16 columns (2j, 2j+1) gives column
// 2j as lane << 16 and column 2j+1 as lane & 0xFFFF0000, so a block of 2L columns (L lanes) is two
// vectors, even and odd columns, matched by activations split the same way once per call (see
// SplitRows). Zero-extending each half instead costs a shuffle-port instruction per 16 weights, and the loop
// was bound by that port, not by memory.
inline float finish_dot(float lanes, const uint16_t* w, const float* x, int64_t k, int64_t K) {
  for (; k < K; ++k) lanes += bf16_to_f32(w[k]) * x[k];
  return lanes;
}

// Activations [N, K] with each whole block of `block` columns as its even columns then its odd ones (the
// tail past the last whole block as it is): what the kernels' even/odd weight vectors multiply.
struct SplitRows {
  std::vector<float> data;
  SplitRows(const float* x, int64_t N, int64_t K, int64_t block) : data(x, x + N * K) {
    if (block == 0) return;
    const int64_t whole = K / block * block, half = block / 2;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t b = 0; b < whole; b += block)
        for (int64_t j = 0; j < half; ++j) {
          data[n * K + b + j] = x[n * K + b + 2 * j];
          data[n * K + b + half + j] = x[n * K + b + 2 * j + 1];
        }
  }
};

// acc[i][j] + one AVX-512 step of 32 columns (16-lane accumulators), the one order every AVX-512 form uses.
// stream: a pass that reads W from memory, with the near prefetch and, for each row of the next tile (the
// rows_after rows past this one, at most NO), a prefetch into L2 at the same column: a tile's rows start on
// fresh pages, where the hardware prefetcher starts over (cold weights read faster; wide rows unchanged).
template <int NO, int NN, int64_t Ahead = kPrefetchBf16>
K3_AVX512 inline void step_avx512(const uint16_t* w, const float* x, int64_t K, int64_t o0, int64_t n0, int64_t k,
                                  int64_t rows_after, bool stream, __m512 (&acc)[NO][NN]) {
  const __m512i odd = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m512 xe[NN], xo[NN];
  for (int j = 0; j < NN; ++j) {
    xe[j] = _mm512_loadu_ps(x + (n0 + j) * K + k);
    xo[j] = _mm512_loadu_ps(x + (n0 + j) * K + k + 16);
  }
  for (int i = 0; i < NO; ++i) {
    if (stream) {
      prefetch_ahead<Ahead>(w + (o0 + i) * K + k);  // once per 64-byte line
      if (i < rows_after) _mm_prefetch(reinterpret_cast<const char*>(w + (o0 + NO + i) * K + k), _MM_HINT_T1);
    }
    const __m512i raw = _mm512_loadu_si512(w + (o0 + i) * K + k);
    const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
    const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(raw, odd));
    for (int j = 0; j < NN; ++j) acc[i][j] = _mm512_fmadd_ps(wo, xo[j], _mm512_fmadd_ps(we, xe[j], acc[i][j]));
  }
}

// The AVX-512 tile: steps of 32 over k (used for every tile at that level, so the one-fixed-order rule
// holds there too). Returns how far k got.
template <int NO, int NN, int64_t Ahead = kPrefetchBf16>
K3_AVX512 int64_t linear_tile_avx512(const uint16_t* w, const float* x, int64_t K, int64_t o0, int64_t n0,
                                     int64_t rows_after, float (&sums)[NO][NN]) {
  __m512 acc[NO][NN];
  for (int i = 0; i < NO; ++i)
    for (int j = 0; j < NN; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) step_avx512<NO, NN, Ahead>(w, x, K, o0, n0, k, rows_after, true, acc);
  for (int i = 0; i < NO; ++i)
    for (int j = 0; j < NN; ++j) sums[i][j] = _mm512_reduce_add_ps(acc[i][j]);
  return k;
}

#ifdef __AVX2__
// acc[i][j] + one block of 16 columns: the even and odd halves of each weight vector, in that order.
template <int NO, int NN>
inline void block_avx2(const uint16_t* w, const float* x, int64_t K, int64_t o0, int64_t n0, int64_t k,
                       __m256 (&acc)[NO][NN]) {
  const __m256i odd = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m256 xe[NN], xo[NN];
  for (int j = 0; j < NN; ++j) {
    xe[j] = _mm256_loadu_ps(x + (n0 + j) * K + k);
    xo[j] = _mm256_loadu_ps(x + (n0 + j) * K + k + 8);
  }
  for (int i = 0; i < NO; ++i) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + (o0 + i) * K + k));
    const __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
    const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(raw, odd));
    for (int j = 0; j < NN; ++j) acc[i][j] = _mm256_fmadd_ps(wo, xo[j], _mm256_fmadd_ps(we, xe[j], acc[i][j]));
  }
}

// The AVX2 form: 8-lane accumulators over k in blocks of 16, two blocks (a 64-byte line of each weight
// row) per step, then a last lone block: the same order as one block per step. Prefetches as the
// AVX-512 form (cold weights read faster than with one block per step and the near prefetch alone).
template <int NO, int NN, int64_t Ahead = kPrefetchBf16>
int64_t linear_tile_avx2(const uint16_t* w, const float* x, int64_t K, int64_t o0, int64_t n0, int64_t rows_after,
                         float (&sums)[NO][NN]) {
  __m256 acc[NO][NN];
  for (int i = 0; i < NO; ++i)
    for (int j = 0; j < NN; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    for (int i = 0; i < NO; ++i) {
      prefetch_ahead<Ahead>(w + (o0 + i) * K + k);
      if (i < rows_after) _mm_prefetch(reinterpret_cast<const char*>(w + (o0 + NO + i) * K + k), _MM_HINT_T1);
    }
    block_avx2<NO, NN>(w, x, K, o0, n0, k, acc);
    block_avx2<NO, NN>(w, x, K, o0, n0, k + 16, acc);
  }
  if (k + 16 <= K) {
    block_avx2<NO, NN>(w, x, K, o0, n0, k, acc);
    k += 16;
  }
  for (int i = 0; i < NO; ++i)
    for (int j = 0; j < NN; ++j) sums[i][j] = hsum(acc[i][j]);
  return k;
}
#endif

// Five to eight rows on AVX-512 (a verify window): a tile of 4 outputs reads its W rows from memory once,
// in spans of kSpanColumns columns. Over each span the first of two groups of rows (5 rows as 3 + 2, up to
// 4 + 4) streams the W rows (with the tile form's prefetches) and the second reads the span again from L1;
// each group's accumulators wait in `acc` between spans, so every output is still one accumulator over k
// in step order, then the reduction and the tail: the tile form's bits. A tile of 2 outputs x 5 rows
// streams only two W rows at a time. (Past eight rows, fours of rows in tiles were as fast or faster, and
// on AVX2 the same spans measured no faster than its tiles: there the multiply, not the stream, is the
// limit.)
constexpr int64_t kSpanColumns = 512, kSpanRows = 8;

K3_AVX512 inline float reduce16(const __m512* v) { return _mm512_reduce_add_ps(*v); }

// Outputs [o0, o0 + NO) of rows [n0, n0 + NN) over columns [k0, k1) (whole steps of 32), continuing the
// accumulators of rows n0.. in acc ([NO][kSpanRows]).
template <int NO, int NN>
K3_AVX512 void span_avx512(const uint16_t* w, const float* x, int64_t K, int64_t o0, int64_t n0, int64_t k0,
                           int64_t k1, int64_t rows_after, bool stream, __m512* acc) {
  __m512 a[NO][NN];
  for (int i = 0; i < NO; ++i)
    for (int j = 0; j < NN; ++j) a[i][j] = acc[i * kSpanRows + n0 + j];
  for (int64_t k = k0; k + 32 <= k1; k += 32) step_avx512<NO, NN>(w, x, K, o0, n0, k, rows_after, stream, a);
  for (int i = 0; i < NO; ++i)
    for (int j = 0; j < NN; ++j) acc[i * kSpanRows + n0 + j] = a[i][j];
}

// One group of `rows` (2 to 4) rows from n0 over a span.
template <int NO>
K3_AVX512 void span_rows_avx512(const uint16_t* w, const float* x, int64_t K, int64_t o0, int64_t n0, int64_t k0,
                                int64_t k1, int64_t rows_after, bool stream, __m512* acc, int64_t rows) {
  const auto run = rows == 4 ? span_avx512<NO, 4> : rows == 3 ? span_avx512<NO, 3> : span_avx512<NO, 2>;
  run(w, x, K, o0, n0, k0, k1, rows_after, stream, acc);
}

// Outputs [o0, o0 + NO) of N rows, 5 <= N <= kSpanRows.
template <int NO>
void linear_spans_avx512(const uint16_t* w, const float* x, int64_t N, int64_t K, int64_t O, int64_t o0, float* y) {
  const int64_t whole = K / 32 * 32, rows_after = O - o0 - NO, first = (N + 1) / 2;
  alignas(64) __m512 acc[NO * kSpanRows];
  std::memset(acc, 0, sizeof(acc));
  for (int64_t k0 = 0; k0 < whole; k0 += kSpanColumns) {
    const int64_t k1 = std::min(k0 + kSpanColumns, whole);
    span_rows_avx512<NO>(w, x, K, o0, 0, k0, k1, rows_after, true, acc, first);
    span_rows_avx512<NO>(w, x, K, o0, first, k0, k1, rows_after, false, acc, N - first);
  }
  for (int i = 0; i < NO; ++i)
    for (int64_t j = 0; j < N; ++j)
      y[j * O + o0 + i] = finish_dot(reduce16(acc + i * kSpanRows + j), w + (o0 + i) * K, x + j * K, whole, K);
}

// Outputs [o0, o0 + NO) of rows [n0, n0 + NN), each row of W prefetched Ahead bytes ahead and, with
// NextTile, the next tile's rows into L2 (the sequential form reads the next row next, and takes none).
template <int NO, int NN, int64_t Ahead = kPrefetchBf16, bool NextTile = true>
void linear_tile(const uint16_t* w, const float* x, int64_t K, int64_t O, int64_t o0, int64_t n0, float* y) {
  int64_t k = 0;
  float sums[NO][NN] = {};
  const int64_t rows_after = NextTile ? O - o0 - NO : 0;
  if (g_simd >= 2) {
    k = linear_tile_avx512<NO, NN, Ahead>(w, x, K, o0, n0, rows_after, sums);
  }
#ifdef __AVX2__
  else if (g_simd >= 1) {
    k = linear_tile_avx2<NO, NN, Ahead>(w, x, K, o0, n0, rows_after, sums);
  }
#endif
  for (int i = 0; i < NO; ++i)
    for (int j = 0; j < NN; ++j)
      y[(n0 + j) * O + o0 + i] = finish_dot(sums[i][j], w + (o0 + i) * K, x + (n0 + j) * K, k, K);
}

// Outputs [o0, o0 + NO) for every row: rows in fours on AVX-512 (16 accumulators of its 32 registers; five
// to eight rows in spans, linear_spans_avx512),
// in pairs on AVX2 (its 16 would spill) but the last four as pairs of outputs x 4 rows, and what is left
// in one tile: 5 rows (a verify window) as pairs of outputs x 5 rows, 3 rows or 1 row across all NO
// outputs. Each pass widens the weights again, and a lone row after the others was a pass of its own,
// bound by the latency of its two FMAs a block rather than by their throughput.
template <int NO>
void linear_outputs(const uint16_t* w, const float* x, int64_t N, int64_t K, int64_t O, int64_t o0, float* y) {
  if constexpr (NO == 4)
    if (g_simd >= 2 && N >= 5 && N <= kSpanRows) return linear_spans_avx512<4>(w, x, N, K, O, o0, y);
  const int64_t group = g_simd >= 2 ? 4 : 2;
  int64_t n = 0;
  while (N - n >= group && N - n != 5 && N - n != 3) {
    if (group == 4) {
      linear_tile<NO, 4>(w, x, K, O, o0, n, y);
      n += 4;
    } else if (N - n == 4 && NO % 2 == 0) {
      for (int64_t i = 0; i < NO; i += 2) linear_tile<2, 4>(w, x, K, O, o0 + i, n, y);
      n += 4;
    } else {
      linear_tile<NO, 2>(w, x, K, O, o0, n, y);
      n += 2;
    }
  }
  if (N - n == 5 && NO % 2 == 0) {
    for (int64_t i = 0; i < NO; i += 2) linear_tile<2, 5>(w, x, K, O, o0 + i, n, y);
    n += 5;
  }
  if (N - n == 3) {
    linear_tile<NO, 3>(w, x, K, O, o0, n, y);
    n += 3;
  }
  for (; n + 2 <= N; n += 2) linear_tile<NO, 2>(w, x, K, O, o0, n, y);
  for (; n < N; ++n) linear_tile<NO, 1>(w, x, K, O, o0, n, y);
}

}  // namespace

at::Tensor bf16_linear(at::Tensor x, at::Tensor w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kBFloat16 && w.is_contiguous(), "w must be contiguous bf16 [O, K]");
  const int64_t N = x.size(0), K = w.size(1), O = w.size(0);
  check_x(x, K);
  auto y = at::empty({N, O}, x.options());
  const SplitRows split(x.data_ptr<float>(), N, K, g_simd >= 2 ? 32 : g_simd >= 1 ? 16 : 0);
  const float* xp = split.data.data();
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  float* yp = y.data_ptr<float>();
  // Tiles of 4 outputs x 4 or 2 rows: 16 or 8 independent accumulators. A lone row (decode) takes 8
  // outputs at a time on AVX-512: 8 weight rows streaming at once keep more memory reads in flight
  // there; on AVX2, 4 read faster. Each output's sum is the same either way.
  // The sequential decode form, for W's rows of at most g_gemv_sequential_bytes (k3.ops.native.decode_gemv,
  // measured per CPU: short rows streamed faster one after another, long ones in tiles): W's rows one at a
  // time in two streams per thread, each row prefetched kPrefetchSequential bytes ahead; the same per-output
  // sums as the tiles.
  if (N == 1 && g_simd >= 1 && 2 * K <= g_gemv_sequential_bytes) {
    rows_in_two_streams(O, [&](int64_t o) { linear_tile<1, 1, kPrefetchSequential, false>(wp, xp, K, O, o, 0, yp); });
    return y;
  }
  const int64_t step = N == 1 && g_simd >= 2 ? 8 : 4, tiles = O / step;
  if (step == 8) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) linear_outputs<8>(wp, xp, N, K, O, t * step, yp);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) linear_outputs<4>(wp, xp, N, K, O, t * step, yp);
  }
  for (int64_t o = tiles * step; o < O; ++o) linear_outputs<1>(wp, xp, N, K, O, o, yp);
  return y;
}

// bf16 -> fp32, exact (the 16 bits become the high half), for the GEMMs of many rows: ATen's
// conversion ran at about 0.5 G elements/s here, this loop vectorises to several per nanosecond.
at::Tensor bf16_widen(at::Tensor w) {
  TORCH_CHECK(w.scalar_type() == at::kBFloat16 && w.is_contiguous(), "w must be contiguous bf16");
  auto out = at::empty(w.sizes(), w.options().dtype(at::kFloat));
  const uint16_t* src = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  uint32_t* dst = reinterpret_cast<uint32_t*>(out.data_ptr<float>());
  const int64_t n = w.numel();
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<uint32_t>(src[i]) << 16;
  return out;
}

at::Tensor bf16_head_linear(at::Tensor x, at::Tensor w, bool transpose) {
  TORCH_CHECK(w.dim() == 3 && w.scalar_type() == at::kBFloat16 && w.stride(2) == 1, "w must be bf16 [H, R, C] with contiguous rows");
  TORCH_CHECK(x.dim() == 3 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x must be contiguous fp32 [N, H, in]");
  const int64_t N = x.size(0), H = w.size(0), R = w.size(1), C = w.size(2);
  const int64_t in = transpose ? R : C, out = transpose ? C : R;
  TORCH_CHECK(x.size(1) == H && x.size(2) == in, "x must be [N, H, ", in, "]");
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  const int64_t hs = w.stride(0), rs = w.stride(1);
  const float* xp = x.data_ptr<float>();
  auto y = at::zeros({N, H, out}, x.options());
  float* yp = y.data_ptr<float>();
  // Heads outer, rows inner: a verify window's rows of one head run back to back on one thread while the
  // head's weights are in cache (rows outer read every head's weights once per row).
#pragma omp parallel for schedule(static)
  for (int64_t hn = 0; hn < N * H; ++hn) {
    const int64_t h = hn / N, n = hn % N, nh = n * H + h;
    const float* xr = xp + nh * in;
    float* yr = yp + nh * out;
    if (transpose)
      for (int64_t r = 0; r < R; ++r) axpy_bf16(xr[r], wp + h * hs + r * rs, yr, C);
    else
      for (int64_t r = 0; r < R; ++r) yr[r] = dot_bf16(wp + h * hs + r * rs, xr, C);
  }
  return y;
}

}  // namespace k3
