// k3's native CPU kernels: the header every unit includes. Each .cpp here is its own translation unit
// (ops/native/__init__.py lists them; ninja rebuilds only the units an edit touches, or all of them when
// this header changes), and only bindings.cpp includes torch/extension.h and pybind11: the kernel units
// see ATen's tensor type alone, which compiles several times faster.
//
// Weights are widened to fp32 in registers (bf16 -> fp32 is a 16-bit shift; E2M1 codes decode through
// a 16-entry table), products accumulate in fp32, output rows are split over OpenMP threads. The units
// are built for AVX2+FMA when the CPU has them; AVX-512 kernels carry their own target attribute and run
// only when `set_simd(2)` says the CPU has AVX-512F/BW/VL.
//
// Here: the settings every unit reads (C++17 inline variables: one instance in the module), the vector
// helpers and small kernels the families share, the part timers, and the entry points of every family.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>
#include <immintrin.h>
#include <omp.h>

namespace k3 {

inline int g_simd = 0;  // 0 scalar, 1 AVX2+FMA, 2 AVX-512 (set from Python after checking the CPU's flags)
// Decode GEMVs (bf16, int8) read W's rows one after another where a row holds at most this many bytes,
// else in tiles of rows (0: tiles for every weight).
inline int64_t g_gemv_sequential_bytes = 0;

// Kernels compiled for AVX-512 whatever the build flags; called only when g_simd >= 2.
#define K3_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

// Software prefetch for the weight streams of decode products, `Bytes` ahead of the load. A GEMV reads
// each weight once, from several short row streams per thread (or, for the MXFP4 experts, one stream per
// thread): the hardware prefetcher alone read them more slowly, short rows most of all. 512 bytes ahead
// suited the bf16 rows, 1024 the slower-consumed MXFP4 codes.
// Past the end of a row it fetches the start of the next one, which the kernels read next.
// With g_prefetch_nta the hint is non-temporal: the weights (read once a token, far more than the caches
// hold) then displace less of what is read again, the KDA states, the activations and the interpreter's
// own objects (faster on AMD with AVX-512, where it is the default; docs/design/kernels.md).
constexpr int64_t kPrefetchBf16 = 512, kPrefetchMxfp4 = 1024, kPrefetchSequential = 2048;
inline bool g_prefetch_nta = false;
// The CPU has AVX512_BF16's dot-product instruction (set from Python's reading of its flags): gemm_dot.cpp.
inline bool g_bf16_dot = false;

// A prefetch further ahead (a later row's line, into L2): with g_prefetch_nta non-temporal too. A T1
// hint there installs every line in the caches' normal way, so on AMD, whose L3 takes the lines L2
// evicts, the experts' 94 MB a token of compare.py's checkpoint flushed the whole L3 each token (a
// microbenchmark kept a small working set in L3 between large streams only when every prefetch of the
// streams was non-temporal).
inline void prefetch_far(const void* p) {
  if (g_prefetch_nta)
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_NTA);
  else
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
}

template <int64_t Bytes>
inline void prefetch_ahead(const void* p) {
  const char* at = static_cast<const char*>(p) + Bytes;
  if (g_prefetch_nta)
    _mm_prefetch(at, _MM_HINT_NTA);
  else
    _mm_prefetch(at, _MM_HINT_T0);
}

// row(o) for every o in [0, O), as the sequential decode GEMVs read W: each OpenMP thread takes a
// contiguous share of the rows and walks it as two sequential streams, a row from its first half, then
// one from its second. Two independent streams per core keep more reads in flight than one, and each
// stays in order for the hardware prefetcher.
template <class Row>
void rows_in_two_streams(int64_t O, Row row) {
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t lo = O * t / threads, hi = O * (t + 1) / threads, half = (hi - lo) / 2;
    for (int64_t i = 0; i < half; ++i) {
      row(lo + i);
      row(lo + half + i);
    }
    for (int64_t o = lo + 2 * half; o < hi; ++o) row(o);
  }
}

inline float bf16_to_f32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// exp, sigmoid and tanh over arrays in 8-lane GCC vectors (the compiler's own instructions: AVX2 when
// built for it, SSE otherwise), where std::exp and std::tanh are scalar library calls of about 10 ns an
// element. exp: Cephes' range reduction and degree-6 polynomial, within about 1e-7 relative over
// [-87, 88] (inputs are clamped there, so results stay normal); tanh: Cephes' odd polynomial below
// 0.625, 1 - 2 / (exp(2|x|) + 1) above. A tail shorter than 8 runs the same lanes padded, so every
// element is computed the same way wherever it sits. Tests compare the kernels with the references.
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));  // for the AVX-512 forms (K3_AVX512 callers) only

inline v8f splat(float v) { return v8f{v, v, v, v, v, v, v, v}; }
template <class V>
inline V splat_as(float v) { return V{} + v; }
template <class M, class V>
inline V pick(M mask, V a, V b) { return mask ? a : b; }

// The helpers below are lane-wise templates over the vector type (v8f, or v16f inside AVX-512 code, into
// which they are always inlined): each lane's result is the same bits at either width.
#define K3_LANES __attribute__((always_inline)) inline
#define K3_LAMBDA __attribute__((always_inline))

template <class V>
K3_LANES V vexp(V x) {
  using I = decltype(x < x);
  x = pick(x < -87.3f, splat_as<V>(-87.3f), pick(x > 88.0f, splat_as<V>(88.0f), x));
  const V t = x * 1.44269504088896341f + 0.5f;
  I i = __builtin_convertvector(t, I);                // truncation, then down to the floor
  i += (t < __builtin_convertvector(i, V));
  const V n = __builtin_convertvector(i, V);
  const V r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  V p = splat_as<V>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const I bits = (i + 127) << 23;
  V scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// log1p(t) for t >= 0: u = 1 + t split as 2^e * m with m in [sqrt(1/2), sqrt(2)), Cephes' logf polynomial
// for log(m), and Goldberg's correction t / (u - 1) for what rounding 1 + t lost (t itself where u == 1):
// within a few ulp, where std::log1p is a scalar library call (kda_gates in docs/benchmarks/results.md).
template <class V>
K3_LANES V vlog1p(V t) {
  using I = decltype(t < t);
  const V u = t + 1.0f;
  I bits;
  std::memcpy(&bits, &u, sizeof bits);
  I e = (bits >> 23) - 127;
  const I mbits = (bits & 0x7FFFFF) | 0x3F800000;
  V m;
  std::memcpy(&m, &mbits, sizeof m);
  const I big = m > 1.41421356f;                       // all ones where m > sqrt(2)
  m = pick(big, m * 0.5f, m);
  e -= big;                                            // -1 per set lane: e + 1 there
  const V f = m - 1.0f, z = f * f;
  V p = splat_as<V>(7.0376836292e-2f);
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  const V ef = __builtin_convertvector(e, V);
  const V log_u = f + (f * z * p - 0.5f * z) + ef * 0.693147180559945f;
  const V d = u - 1.0f;
  return pick(d == 0.0f, t, log_u * (t / pick(d == 0.0f, splat_as<V>(1.0f), d)));
}

// softplus(z) = log(1 + e^z), linear above 20 as torch's.
template <class V>
K3_LANES V vsoftplus(V z) {
  return pick(z > 20.0f, z, vlog1p(vexp(pick(z > 20.0f, splat_as<V>(0.0f), z))));
}

template <class V>
K3_LANES V vtanh(V x) {
  const V sign = pick(x < 0.0f, splat_as<V>(-1.0f), splat_as<V>(1.0f)), a = x * sign, z = x * x;
  V p = splat_as<V>(-5.70498872745e-3f);
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const V large = (1.0f - 2.0f / (vexp(2.0f * a) + 1.0f)) * sign;
  return pick(a < 0.625f, p * z * x + x, large);
}

// y[i] = f(x[i]) for i < n, a vector of V at a time (x and y may be the same array).
template <class V, typename F>
K3_LANES void map_lanes(const float* x, float* y, int64_t n, F f) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    V v;
    std::memcpy(&v, x + i, sizeof v);
    v = f(v);
    std::memcpy(y + i, &v, sizeof v);
  }
  if (i < n) {
    V v = splat_as<V>(0.0f);
    for (int64_t j = 0; j < n - i; ++j) v[j] = x[i + j];
    v = f(v);
    for (int64_t j = 0; j < n - i; ++j) y[i + j] = v[j];
  }
}

template <typename F>
inline void map8(const float* x, float* y, int64_t n, F f) { map_lanes<v8f>(x, y, n, f); }

template <class V>
K3_LANES V vsigmoid(V x) { return 1.0f / (1.0f + vexp(-x)); }

// The GLU activations in place over g (u read): act 0 SiTU, beta*tanh(g/beta)*sigmoid(g) *
// [linear_beta*tanh(u/linear_beta) if linear_beta > 0 else u]; act 1 SiLU, g*sigmoid(g) * u.
template <class V>
K3_LANES void glu_lanes(float* g, const float* u, int64_t n, int64_t act, float beta, float linear_beta) {
  std::vector<float> up(u, u + n);
  if (act == 0 && linear_beta > 0)
    map_lanes<V>(up.data(), up.data(), n, [=](V v) K3_LAMBDA { return linear_beta * vtanh(v / linear_beta); });
  if (act == 0)
    map_lanes<V>(g, g, n, [=](V v) K3_LAMBDA { return beta * vtanh(v / beta) * vsigmoid(v); });
  else
    map_lanes<V>(g, g, n, [](V v) K3_LAMBDA { return v * vsigmoid(v); });
  for (int64_t i = 0; i < n; ++i) g[i] *= up[i];
}

K3_AVX512 inline void glu_avx512(float* g, const float* u, int64_t n, int64_t act, float beta, float linear_beta) {
  glu_lanes<v16f>(g, u, n, act, beta, linear_beta);
}

// The same bits at every instruction set (lane-wise); 16 lanes with AVX-512 (the experts' GLU took about
// a tenth of their time in 8).
inline void glu_in_place(float* g, const float* u, int64_t n, int64_t act, float beta, float linear_beta) {
  if (g_simd >= 2) return glu_avx512(g, u, n, act, beta, linear_beta);
  glu_lanes<v8f>(g, u, n, act, beta, linear_beta);
}

#ifdef __AVX2__
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}

inline __m256 bf16x8(const uint16_t* p) {
  __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}
#endif

inline float dot_bf16(const uint16_t* w, const float* x, int64_t K) {
  int64_t k = 0;
  float s = 0.f;
#ifdef __AVX2__
  if (g_simd >= 1) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (; k + 32 <= K; k += 32) {
      a0 = _mm256_fmadd_ps(bf16x8(w + k), _mm256_loadu_ps(x + k), a0);
      a1 = _mm256_fmadd_ps(bf16x8(w + k + 8), _mm256_loadu_ps(x + k + 8), a1);
      a2 = _mm256_fmadd_ps(bf16x8(w + k + 16), _mm256_loadu_ps(x + k + 16), a2);
      a3 = _mm256_fmadd_ps(bf16x8(w + k + 24), _mm256_loadu_ps(x + k + 24), a3);
    }
    for (; k + 8 <= K; k += 8) a0 = _mm256_fmadd_ps(bf16x8(w + k), _mm256_loadu_ps(x + k), a0);
    s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  }
#endif
  for (; k < K; ++k) s += bf16_to_f32(w[k]) * x[k];
  return s;
}

// y[0:C] += a * w[0:C], w bf16.
inline void axpy_bf16(float a, const uint16_t* w, float* y, int64_t C) {
  int64_t c = 0;
#ifdef __AVX2__
  if (g_simd >= 1) {
    const __m256 va = _mm256_set1_ps(a);
    for (; c + 8 <= C; c += 8)
      _mm256_storeu_ps(y + c, _mm256_fmadd_ps(va, bf16x8(w + c), _mm256_loadu_ps(y + c)));
  }
#endif
  for (; c < C; ++c) y[c] += a * bf16_to_f32(w[c]);
}

inline void check_x(const at::Tensor& x, int64_t K) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.size(1) == K,
              "x must be contiguous fp32 [N, K]");
}

// Wall-clock totals per part of the native decode steps, for benchmarks/decode_profile.py: off unless
// set_part_timing(true), when each PartTimer adds its scope's duration (on the calling thread, outside
// parallel regions) to its part. Off, a timer costs one branch.
enum DecodePart { kPlan, kGemv, kExperts, kKdaRecurrence, kMlaAttention, kRowOps, kPartCount };
inline const char* const kPartNames[kPartCount] = {"decode_plan", "gemv", "experts", "kda_recurrence",
                                                   "mla_attention", "row_ops"};
inline bool g_part_timing = false;
inline double g_part_seconds[kPartCount] = {};

class PartTimer {
 public:
  explicit PartTimer(DecodePart part) : part_(part), on_(g_part_timing) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  ~PartTimer() {
    if (on_)
      g_part_seconds[part_] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  PartTimer(const PartTimer&) = delete;
  PartTimer& operator=(const PartTimer&) = delete;

 private:
  DecodePart part_;
  bool on_;   // as set when the scope began (its start time is read only then)
  std::chrono::steady_clock::time_point start_;
};

// f() with its duration added to `part`.
template <class F>
auto timed(DecodePart part, F f) {
  PartTimer timer(part);
  return f();
}

// The entry points, by family (bindings.cpp registers them for Python).
using Tensors = std::vector<at::Tensor>;
using Ints = std::vector<int64_t>;

// settings.cpp, part_timing.cpp, read_probe.cpp
int64_t set_simd(int64_t level);
int64_t set_gemv_sequential_bytes(int64_t bytes);
bool set_prefetch_nta(bool on);
bool set_bf16_dot(bool on);
bool set_flush_denormal(bool on);
bool set_part_timing(bool on);
uint64_t read_sum(at::Tensor buffer);
std::map<std::string, double> part_seconds();

// bf16.cpp, gemm.cpp
at::Tensor bf16_linear(at::Tensor x, at::Tensor w);
at::Tensor bf16_widen(at::Tensor w);
at::Tensor bf16_head_linear(at::Tensor x, at::Tensor w, bool transpose);
at::Tensor bf16_gemm(at::Tensor x, at::Tensor w);
at::Tensor mxfp4_gemm(at::Tensor x, at::Tensor packed, at::Tensor scale);

// gemm_dot.cpp
at::Tensor bf16_dot_gemm(at::Tensor x, at::Tensor w);
at::Tensor mxfp4_dot_gemm(at::Tensor x, at::Tensor packed, at::Tensor scale);

// int8_weights.cpp
at::Tensor int8_linear(at::Tensor x, at::Tensor q, at::Tensor s);
at::Tensor int8_dequantize(at::Tensor q, at::Tensor s);
bool int8_quantize_into(at::Tensor w, at::Tensor q, at::Tensor s);

// mxfp4.cpp (with mxfp4_dots.h and mxfp4_int8.h)
bool set_int8_activations(bool on);
at::Tensor mxfp4_linear(at::Tensor x, at::Tensor packed, at::Tensor scale);
at::Tensor mxfp4_glu_expert(at::Tensor x, Tensors w, int64_t act, double beta, double linear_beta);
at::Tensor mxfp4_moe_token(at::Tensor x, Tensors bank, Ints ids, std::vector<double> weights, int64_t act,
                           double beta, double linear_beta);
at::Tensor mxfp4_moe_tokens(at::Tensor x, Tensors bank, at::Tensor ids, at::Tensor weights, int64_t act, double beta,
                            double linear_beta);
at::Tensor mxfp4_dequantize(at::Tensor packed, at::Tensor scale);

// kda.cpp, kda_chunk.cpp
at::Tensor kda_decode_slots(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor wq, at::Tensor wk, at::Tensor wv,
                            at::Tensor tq, at::Tensor tk, at::Tensor tv, at::Tensor S, at::Tensor index, at::Tensor g,
                            at::Tensor beta, double scale);
at::Tensor kda_window_slots(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor wq, at::Tensor wk, at::Tensor wv,
                            at::Tensor tq, at::Tensor tk, at::Tensor tv, at::Tensor S, at::Tensor index, at::Tensor g,
                            at::Tensor beta, double scale);
Tensors kda_gates_rows(at::Tensor raw, at::Tensor b, at::Tensor a_log, at::Tensor dt_bias, bool bounded,
                       double lower_bound);
Tensors short_conv_silu(at::Tensor x, at::Tensor w, at::Tensor state);
Tensors kda_chunk(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor g, at::Tensor beta, double scale,
                  at::Tensor initial_state, int64_t chunk);

// mla.cpp
at::Tensor mla_paged_decode(at::Tensor q, at::Tensor pool, at::Tensor tables, at::Tensor lens, int64_t block_size,
                            int64_t rank, double scale);

// norm.cpp, attnres.cpp, routing.cpp
at::Tensor rms_norm_rows(at::Tensor x, at::Tensor w, double eps);
at::Tensor gated_rms_norm_rows(at::Tensor x, at::Tensor gate, at::Tensor w, double eps);
at::Tensor glu_rows(at::Tensor g, at::Tensor u, int64_t act, double beta, double linear_beta);
at::Tensor attn_res_mix(Tensors cands, at::Tensor query, double eps);
at::Tensor attn_res_mix_weights(Tensors cands, at::Tensor norm, at::Tensor proj, double eps);
Tensors moe_route_rows(at::Tensor logits, at::Tensor bias, int64_t top_k, bool renormalise, double scaling);

}  // namespace k3
