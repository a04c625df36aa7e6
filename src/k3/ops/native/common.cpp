// k3 native CPU kernels, shared pieces. The sources are joined in the order native/__init__.py lists
// them and built as one extension.
//
// Weights are widened to fp32 in registers (bf16 -> fp32 is a 16-bit shift; E2M1 codes decode through
// a 16-entry table), products accumulate in fp32, output rows are split over OpenMP threads. The
// translation unit is built for AVX2+FMA when the CPU has them; AVX-512 kernels carry their own
// target attribute and run only when `set_simd(2)` says the CPU has AVX-512F/BW/VL.
#include <torch/extension.h>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <vector>
#include <immintrin.h>

namespace {

int g_simd = 0;  // 0 scalar, 1 AVX2+FMA, 2 AVX-512 (set from Python after checking the CPU's flags)

// Kernels compiled for AVX-512 whatever the build flags; called only when g_simd >= 2.
#define K3_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

// Software prefetch for the weight streams of decode products, `Bytes` ahead of the load. A GEMV reads
// each weight once, from several short row streams per thread (or, for the MXFP4 experts, one stream per
// thread): with the hardware prefetcher alone a core read bf16 rows at 13 GB/s against 15-16 with this,
// 2 KB rows (K = 1024) at 18 against 22 GB/s, and an in-model MXFP4 expert layer took 1.4 against 1.0 ms
// (2-core Xeon, measured; 512 bytes ahead suited the bf16 rows, 1024 the slower-consumed MXFP4 codes).
// Past the end of a row it fetches the start of the next one, which the kernels read next.
constexpr int64_t kPrefetchBf16 = 512, kPrefetchMxfp4 = 1024;

template <int64_t Bytes>
inline void prefetch_ahead(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + Bytes, _MM_HINT_T0);
}

inline float bf16_to_f32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
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

float dot_bf16(const uint16_t* w, const float* x, int64_t K) {
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
void axpy_bf16(float a, const uint16_t* w, float* y, int64_t C) {
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

void check_x(const torch::Tensor& x, int64_t K) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous() && x.size(1) == K,
              "x must be contiguous fp32 [N, K]");
}

}  // namespace

// Chooses the instruction set (0 scalar, 1 AVX2+FMA, 2 AVX-512) within what this build has; returns it.
int64_t set_simd(int64_t level) {
#ifdef __AVX2__
  g_simd = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(level, 2)));
#else
  g_simd = 0;
#endif
  return g_simd;
}

// Flush-to-zero and denormals-are-zero (MXCSR bits 15 and 6) on the calling thread (the region's thread
// 0) and every thread of the OpenMP pool, which ATen and MKL share with these kernels (one libgomp per process). Chunked KDA
// multiplies long decay products whose subnormal results x86 handles through microcode assists: a
// batched matmul with subnormal operands measured 67x slower. Returns whether it was on before.
bool set_flush_denormal(bool on) {
  const unsigned bits = 0x8040;
  const bool before = (_mm_getcsr() & bits) == bits;
#pragma omp parallel
  {
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(on ? (csr | bits) : (csr & ~bits));
  }
  return before;
}
