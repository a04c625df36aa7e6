// k3 native CPU kernels: matrix-vector products that read compact weights once, at memory speed.
//
// bf16_linear:  y[n, o] = sum_k x[n, k] * w[o, k]   x fp32 [N, K], w bf16 [O, K]
// mxfp4_linear: y[n, o] = sum_k x[n, k] * W[o, k]   W = E2M1(code) * 2^(scale - 127), packed [O, K/2]
//               (column 2j in the low nibble), scale [O, K/32] (E8M0)
// Weights are widened to fp32 in registers (bf16 -> fp32 is a 16-bit shift; E2M1 x 2 is an exact int8
// found by a 16-entry byte shuffle), products accumulate in fp32. Rows of the output are split over
// OpenMP threads. Built for AVX2+FMA when the CPU has them, plain C++ otherwise.
#include <torch/extension.h>
#include <cstdint>
#include <cstring>
#include <cmath>
#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace {

inline float bf16_to_f32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// E2M1 codes times two: exact small integers.
const int8_t kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

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
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (; k + 32 <= K; k += 32) {
    a0 = _mm256_fmadd_ps(bf16x8(w + k), _mm256_loadu_ps(x + k), a0);
    a1 = _mm256_fmadd_ps(bf16x8(w + k + 8), _mm256_loadu_ps(x + k + 8), a1);
    a2 = _mm256_fmadd_ps(bf16x8(w + k + 16), _mm256_loadu_ps(x + k + 16), a2);
    a3 = _mm256_fmadd_ps(bf16x8(w + k + 24), _mm256_loadu_ps(x + k + 24), a3);
  }
  for (; k + 8 <= K; k += 8) a0 = _mm256_fmadd_ps(bf16x8(w + k), _mm256_loadu_ps(x + k), a0);
  s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
#endif
  for (; k < K; ++k) s += bf16_to_f32(w[k]) * x[k];
  return s;
}

float dot_mxfp4(const uint8_t* packed, const uint8_t* scale, const float* x, int64_t K, const float* half_pow2) {
  const int64_t groups = K / 32;
  float s = 0.f;
  int64_t g = 0;
#ifdef __AVX2__
  const __m128i lut = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kE2M1x2));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  for (; g < groups; ++g) {
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + g * 16));
    __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(bytes, low4));
    __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(bytes, 4), low4));
    __m128i c0 = _mm_unpacklo_epi8(lo, hi);  // columns 0..15 of the group
    __m128i c1 = _mm_unpackhi_epi8(lo, hi);  // columns 16..31
    const float* xg = x + g * 32;
    __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c0));
    __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c0, 8)));
    __m256 w2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c1));
    __m256 w3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c1, 8)));
    __m256 part = _mm256_mul_ps(w0, _mm256_loadu_ps(xg));
    part = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xg + 8), part);
    part = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xg + 16), part);
    part = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xg + 24), part);
    acc = _mm256_fmadd_ps(part, _mm256_set1_ps(half_pow2[scale[g]]), acc);
  }
  s = hsum(acc);
#endif
  for (; g < groups; ++g) {
    float part = 0.f;
    for (int j = 0; j < 16; ++j) {
      uint8_t b = packed[g * 16 + j];
      part += kE2M1x2[b & 0xF] * x[g * 32 + 2 * j] + kE2M1x2[b >> 4] * x[g * 32 + 2 * j + 1];
    }
    s += part * half_pow2[scale[g]];
  }
  return s;
}

void check_x(const torch::Tensor& x, int64_t K) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous() && x.size(1) == K,
              "x must be contiguous fp32 [N, K]");
}

}  // namespace

torch::Tensor bf16_linear(torch::Tensor x, torch::Tensor w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kBFloat16 && w.is_contiguous(), "w must be contiguous bf16 [O, K]");
  const int64_t N = x.size(0), K = w.size(1), O = w.size(0);
  check_x(x, K);
  auto y = torch::empty({N, O}, x.options());
  const float* xp = x.data_ptr<float>();
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  float* yp = y.data_ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < O; ++o)
    for (int64_t n = 0; n < N; ++n) yp[n * O + o] = dot_bf16(wp + o * K, xp + n * K, K);
  return y;
}

torch::Tensor mxfp4_linear(torch::Tensor x, torch::Tensor packed, torch::Tensor scale) {
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == torch::kUInt8 && packed.is_contiguous(), "packed must be contiguous uint8");
  TORCH_CHECK(scale.dim() == 2 && scale.scalar_type() == torch::kUInt8 && scale.is_contiguous(), "scale must be contiguous uint8");
  const int64_t N = x.size(0), O = packed.size(0), K = packed.size(1) * 2;
  TORCH_CHECK(K % 32 == 0 && scale.size(0) == O && scale.size(1) == K / 32, "packed/scale shapes do not match group size 32");
  check_x(x, K);
  float half_pow2[256];  // 2^(s - 127) / 2: the codes are E2M1 x 2
  for (int s = 0; s < 256; ++s) half_pow2[s] = s == 255 ? NAN : std::ldexp(1.0f, s - 128);
  auto y = torch::empty({N, O}, x.options());
  const float* xp = x.data_ptr<float>();
  const uint8_t* pp = packed.data_ptr<uint8_t>();
  const uint8_t* sp = scale.data_ptr<uint8_t>();
  float* yp = y.data_ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < O; ++o)
    for (int64_t n = 0; n < N; ++n) yp[n * O + o] = dot_mxfp4(pp + o * (K / 2), sp + o * (K / 32), xp + n * K, K, half_pow2);
  return y;
}

// One routed expert, fused: h = act(x W1^T, x W3^T) (SiTU-GLU or SiLU-GLU), y = h W2^T, all MXFP4.
// act 0: SiTU, beta*tanh(g/beta)*sigmoid(g) * [linear_beta*tanh(u/linear_beta) if linear_beta > 0 else u];
// act 1: silu(g) * u. Saves two calls and the activation's temporaries per expert.
torch::Tensor mxfp4_glu_expert(torch::Tensor x, torch::Tensor w1p, torch::Tensor w1s, torch::Tensor w3p,
                               torch::Tensor w3s, torch::Tensor w2p, torch::Tensor w2s, int64_t act, double beta,
                               double linear_beta) {
  const int64_t N = x.size(0), D = x.size(1), I = w1p.size(0);
  TORCH_CHECK(w1p.size(1) * 2 == D && w3p.size(0) == I && w2p.size(0) == D && w2p.size(1) * 2 == I,
              "expert shapes do not match");
  for (const auto& t : {w1p, w1s, w3p, w3s, w2p, w2s})
    TORCH_CHECK(t.scalar_type() == torch::kUInt8 && t.is_contiguous(), "expert tensors must be contiguous uint8");
  TORCH_CHECK(D % 32 == 0 && I % 32 == 0, "expert widths must be multiples of 32");
  check_x(x, D);
  float half_pow2[256];
  for (int s = 0; s < 256; ++s) half_pow2[s] = s == 255 ? NAN : std::ldexp(1.0f, s - 128);
  auto h = torch::empty({N, I}, x.options());
  auto y = torch::empty({N, D}, x.options());
  const float* xp = x.data_ptr<float>();
  float* hp = h.data_ptr<float>();
  const float b = static_cast<float>(beta), lb = static_cast<float>(linear_beta);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < I; ++i)
    for (int64_t n = 0; n < N; ++n) {
      float g = dot_mxfp4(w1p.data_ptr<uint8_t>() + i * (D / 2), w1s.data_ptr<uint8_t>() + i * (D / 32), xp + n * D, D, half_pow2);
      float u = dot_mxfp4(w3p.data_ptr<uint8_t>() + i * (D / 2), w3s.data_ptr<uint8_t>() + i * (D / 32), xp + n * D, D, half_pow2);
      float sig = 1.0f / (1.0f + std::exp(-g));
      float a = act == 0 ? b * std::tanh(g / b) * sig : g * sig;
      if (act == 0 && lb > 0) u = lb * std::tanh(u / lb);
      hp[n * I + i] = a * u;
    }
  float* yp = y.data_ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t d = 0; d < D; ++d)
    for (int64_t n = 0; n < N; ++n)
      yp[n * D + d] = dot_mxfp4(w2p.data_ptr<uint8_t>() + d * (I / 2), w2s.data_ptr<uint8_t>() + d * (I / 32), hp + n * I, I, half_pow2);
  return y;
}
