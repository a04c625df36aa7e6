// int8 trunk weights (k3 quantize --trunk int8, or trunk="int8" at load): q int8 [O, K] with one bf16
// scale per 32 inputs of a row, s [O, ceil(K / 32)] (the last group may be short).
//
// int8_linear:     y[n, o] = sum_k x[n, k] (q[o, k] s[o, k / 32])      x fp32 [N, K]
// int8_dequantize: w[o, k] = q[o, k] s[o, k / 32] in fp32 (exact)      (for GEMMs of many rows)
//
// The GEMV rounds x to int16 once per call, with one scale max|x_g| / 32767 per group of 32 inputs (so
// an outlier costs precision in its own group only), and multiplies the codes as integers (pmaddwd: two
// products summed per 32-bit lane, exact); each group's integer sum is converted once and scaled by
// s[o, g] * xs[n, g]. Widening every weight to fp32 instead (convert, scale, fma) was compute-bound, below
// the memory's rate; the integer form does half the vector work per weight. Its only rounding beyond fp32 summation is x's:
//   |y - y_exact| <= sum_g (max|x_g| / 65534) * sum_{k in g} |w[o, k]|
// (2^-16 of each group's largest input; tests/ops/test_int8.py checks every output against it). Tiles and the fixed per-output
// order follow bf16.cpp (batch invariance); each weight byte is read once.
#include "k3.h"

namespace k3 {

namespace {

constexpr int64_t kInt8Group = 32;

// x [N, K] fp32 -> int16 codes (same layout) and one scale per group of 32 inputs, xs [N, G] (0 for an
// all-zero group; NaN for a group holding inf or NaN, so that its row's outputs are NaN, as a float
// product would make them).
void quantise_groups_int16(const float* x, int64_t N, int64_t K, int64_t G, int16_t* xq, float* xs) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * kInt8Group, k1 = std::min(K, k0 + kInt8Group);
      const float* xr = x + n * K;
      float m = 0.f;
      bool finite = true;
      for (int64_t k = k0; k < k1; ++k) {
        finite = finite && std::isfinite(xr[k]);
        m = std::max(m, std::fabs(xr[k]));
      }
      xs[n * G + g] = finite ? m / 32767.f : std::nanf("");
      const float inv = finite && m > 0.f ? 32767.f / m : 0.f;
      for (int64_t k = k0; k < k1; ++k) xq[n * K + k] = static_cast<int16_t>(std::nearbyint(xr[k] * inv));
    }
}

// Groups from k on (whole or the short last one), in order: sum_g s_g xs_g * (integer dot of group g).
inline float finish_int8(float lanes, const int8_t* q, const uint16_t* s, const int16_t* x, const float* xs,
                         int64_t k, int64_t K) {
  for (; k < K; k += kInt8Group) {
    int32_t dot = 0;
    for (int64_t j = k; j < std::min(K, k + kInt8Group); ++j) dot += static_cast<int32_t>(q[j]) * x[j];
    lanes += static_cast<float>(dot) * (bf16_to_f32(s[k / kInt8Group]) * xs[k / kInt8Group]);
  }
  return lanes;
}

template <int NO, int NN, int64_t Ahead = kPrefetchBf16>
K3_AVX512 int64_t int8_tile_avx512(const int8_t* q, const uint16_t* s, const int16_t* x, const float* xs, int64_t K,
                                   int64_t G, int64_t o0, int64_t n0, float (&sums)[NO][NN]) {
  __m512 acc[NO][NN];
  for (int i = 0; i < NO; ++i)
    for (int j = 0; j < NN; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + kInt8Group <= K; k += kInt8Group) {
    const int64_t g = k / kInt8Group;
    __m512i xv[NN];
    float xsg[NN];
    for (int j = 0; j < NN; ++j) {
      xv[j] = _mm512_loadu_si512(x + (n0 + j) * K + k);
      xsg[j] = xs[(n0 + j) * G + g];
    }
    for (int i = 0; i < NO; ++i) {
      const int8_t* row = q + (o0 + i) * K + k;
      if ((k & 63) == 0) prefetch_ahead<Ahead>(row);
      const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row)));
      const float sw = bf16_to_f32(s[(o0 + i) * G + g]);
      for (int j = 0; j < NN; ++j)
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(w, xv[j])), _mm512_set1_ps(sw * xsg[j]), acc[i][j]);
    }
  }
  for (int i = 0; i < NO; ++i)
    for (int j = 0; j < NN; ++j) sums[i][j] = _mm512_reduce_add_ps(acc[i][j]);
  return k;
}

#ifdef __AVX2__
template <int NO, int NN, int64_t Ahead = kPrefetchBf16>
int64_t int8_tile_avx2(const int8_t* q, const uint16_t* s, const int16_t* x, const float* xs, int64_t K, int64_t G,
                       int64_t o0, int64_t n0, float (&sums)[NO][NN]) {
  __m256 acc[NO][NN];
  for (int i = 0; i < NO; ++i)
    for (int j = 0; j < NN; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + kInt8Group <= K; k += kInt8Group) {
    for (int i = 0; i < NO; ++i) {
      const int8_t* row = q + (o0 + i) * K + k;
      if ((k & 63) == 0) prefetch_ahead<Ahead>(row);
      const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
      const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16)));
      const float sw = bf16_to_f32(s[(o0 + i) * G + k / kInt8Group]);
      for (int j = 0; j < NN; ++j) {
        const int16_t* xr = x + (n0 + j) * K + k;
        const __m256i d = _mm256_add_epi32(
            _mm256_madd_epi16(w0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr))),
            _mm256_madd_epi16(w1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + 16))));
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(sw * xs[(n0 + j) * G + k / kInt8Group]), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < NO; ++i)
    for (int j = 0; j < NN; ++j) sums[i][j] = hsum(acc[i][j]);
  return k;
}
#endif

template <int NO, int NN, int64_t Ahead = kPrefetchBf16>
void int8_tile(const int8_t* q, const uint16_t* s, const int16_t* x, const float* xs, int64_t K, int64_t G,
               int64_t O, int64_t o0, int64_t n0, float* y) {
  int64_t k = 0;
  float sums[NO][NN] = {};
  if (g_simd >= 2) k = int8_tile_avx512<NO, NN, Ahead>(q, s, x, xs, K, G, o0, n0, sums);
#ifdef __AVX2__
  else if (g_simd >= 1) k = int8_tile_avx2<NO, NN, Ahead>(q, s, x, xs, K, G, o0, n0, sums);
#endif
  for (int i = 0; i < NO; ++i)
    for (int j = 0; j < NN; ++j)
      y[(n0 + j) * O + o0 + i] = finish_int8(sums[i][j], q + (o0 + i) * K, s + (o0 + i) * G, x + (n0 + j) * K,
                                             xs + (n0 + j) * G, k, K);
}

template <int NO>
void int8_outputs(const int8_t* q, const uint16_t* s, const int16_t* x, const float* xs, int64_t N, int64_t K,
                  int64_t G, int64_t O, int64_t o0, float* y) {
  int64_t n = 0;
  if (g_simd >= 2)
    for (; n + 4 <= N; n += 4) int8_tile<NO, 4>(q, s, x, xs, K, G, O, o0, n, y);
  for (; n + 2 <= N; n += 2) int8_tile<NO, 2>(q, s, x, xs, K, G, O, o0, n, y);
  for (; n < N; ++n) int8_tile<NO, 1>(q, s, x, xs, K, G, O, o0, n, y);
}

inline float int8_weight(const int8_t* q, const uint16_t* s, int64_t k) {
  return static_cast<float>(q[k]) * bf16_to_f32(s[k / kInt8Group]);
}

void check_int8_weights(const at::Tensor& q, const at::Tensor& s) {
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == at::kChar && q.is_contiguous(), "q must be contiguous int8 [O, K]");
  const int64_t G = (q.size(1) + kInt8Group - 1) / kInt8Group;
  TORCH_CHECK(s.dim() == 2 && s.scalar_type() == at::kBFloat16 && s.is_contiguous() && s.size(0) == q.size(0)
              && s.size(1) == G, "s must be contiguous bf16 [O, ceil(K / 32)]");
}

}  // namespace

at::Tensor int8_linear(at::Tensor x, at::Tensor q, at::Tensor s) {
  check_int8_weights(q, s);
  const int64_t N = x.size(0), K = q.size(1), O = q.size(0), G = s.size(1);
  check_x(x, K);
  auto y = at::empty({N, O}, x.options());
  std::vector<int16_t> xq(N * K);
  std::vector<float> xs(N * G);
  quantise_groups_int16(x.data_ptr<float>(), N, K, G, xq.data(), xs.data());
  const int16_t* xp = xq.data();
  const int8_t* qp = q.data_ptr<int8_t>();
  const uint16_t* sp = reinterpret_cast<const uint16_t*>(s.data_ptr<at::BFloat16>());
  float* yp = y.data_ptr<float>();
  if (N == 1 && g_simd >= 1 && K <= g_gemv_sequential_bytes) {
    // the sequential decode form, as bf16_linear's: one row at a time, prefetched further ahead
    rows_in_two_streams(O, [&](int64_t o) { int8_tile<1, 1, kPrefetchSequential>(qp, sp, xp, xs.data(), K, G, O, o, 0, yp); });
    return y;
  }
  const int64_t step = N == 1 ? 8 : 4, tiles = O / step;   // as bf16_linear: 8 rows in flight for decode
  if (step == 8) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) int8_outputs<8>(qp, sp, xp, xs.data(), N, K, G, O, t * step, yp);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) int8_outputs<4>(qp, sp, xp, xs.data(), N, K, G, O, t * step, yp);
  }
  for (int64_t o = tiles * step; o < O; ++o) int8_outputs<1>(qp, sp, xp, xs.data(), N, K, G, O, o, yp);
  return y;
}

at::Tensor int8_dequantize(at::Tensor q, at::Tensor s) {
  check_int8_weights(q, s);
  const int64_t O = q.size(0), K = q.size(1), G = s.size(1);
  auto out = at::empty({O, K}, q.options().dtype(at::kFloat));
  const int8_t* qp = q.data_ptr<int8_t>();
  const uint16_t* sp = reinterpret_cast<const uint16_t*>(s.data_ptr<at::BFloat16>());
  float* dst = out.data_ptr<float>();
#pragma omp parallel for schedule(static) if (O * K >= 65536)
  for (int64_t o = 0; o < O; ++o)
    for (int64_t k = 0; k < K; ++k) dst[o * K + k] = int8_weight(qp + o * K, sp + o * G, k);
  return out;
}

namespace {

// The smallest bf16 >= v (v finite, >= 0), as bits: round to nearest even, then one step up if below.
inline uint16_t bf16_at_least(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  uint16_t b = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
  if (bf16_to_f32(b) < v) ++b;
  return b;
}

template <typename T>
inline float widen(T v) { return static_cast<float>(v); }
template <>
inline float widen<at::BFloat16>(at::BFloat16 v) { return bf16_to_f32(v.x); }

// One row: exactly k3.ops.int8.format's reference (fp32 max, fp32 division, round half to even).
template <typename T>
bool quantise_row(const T* w, int64_t K, int8_t* q, uint16_t* s) {
  for (int64_t k0 = 0; k0 < K; k0 += kInt8Group) {
    const int64_t k1 = std::min(K, k0 + kInt8Group);
    float m = 0.f;
    for (int64_t k = k0; k < k1; ++k) {
      const float v = widen(w[k]);
      if (!std::isfinite(v)) return false;
      m = std::max(m, std::fabs(v));
    }
    const uint16_t b = bf16_at_least(m / 127.f);
    const float scale = bf16_to_f32(b);
    s[k0 / kInt8Group] = b;
    for (int64_t k = k0; k < k1; ++k) {
      const float r = scale > 0.f ? std::nearbyint(widen(w[k]) / scale) : 0.f;
      q[k] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, r)));
    }
  }
  return true;
}

template <typename T>
bool quantise_rows(const T* w, int64_t O, int64_t K, int64_t G, int8_t* q, uint16_t* s) {
  bool ok = true;
#pragma omp parallel for schedule(static) reduction(&& : ok) if (O * K >= 65536)
  for (int64_t o = 0; o < O; ++o) ok = quantise_row(w + o * K, K, q + o * K, s + o * G) && ok;
  return ok;
}

}  // namespace

// w [O, K] (bf16, fp16 or fp32, contiguous) -> q, s (preallocated int8 [O, K], bf16 [O, ceil(K / 32)]).
// Returns false, leaving q and s partly written, when w holds inf or NaN.
bool int8_quantize_into(at::Tensor w, at::Tensor q, at::Tensor s) {
  check_int8_weights(q, s);
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous() && w.size(0) == q.size(0) && w.size(1) == q.size(1),
              "w must be contiguous [O, K] like q");
  const int64_t O = w.size(0), K = w.size(1), G = s.size(1);
  int8_t* qp = q.data_ptr<int8_t>();
  uint16_t* sp = reinterpret_cast<uint16_t*>(s.data_ptr<at::BFloat16>());
  switch (w.scalar_type()) {
    case at::kBFloat16: return quantise_rows(w.data_ptr<at::BFloat16>(), O, K, G, qp, sp);
    case at::kHalf: return quantise_rows(w.data_ptr<at::Half>(), O, K, G, qp, sp);
    case at::kFloat: return quantise_rows(w.data_ptr<float>(), O, K, G, qp, sp);
    default: TORCH_CHECK(false, "w must be bf16, fp16 or fp32");
  }
}

}  // namespace k3
