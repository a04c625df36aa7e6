// The packing half of the blocked GEMMs (gemm.cpp's fp32 micro-kernels, gemm_dot.cpp's bf16 dot-product
// ones): the depth block, the tiles, x's rows packed per tile and the weights' panels widened or decoded
// to fp32 as they are packed, for bf16 and MXFP4 weights alike.
#pragma once
#include "k3.h"
#include "mxfp4.h"

namespace k3 {

namespace {

constexpr int64_t kGemmDepth = 256;

// The micro-kernel's tile per instruction set: R rows of x by C weight rows (outputs).
struct Avx2Tile {
  static constexpr int R = 6, C = 16;
};
struct Avx512Tile {
  static constexpr int R = 12, C = 32;
};

#ifdef __AVX2__
// r[i][j] -> r[j][i] for an 8 x 8 block of floats.
inline void transpose8(__m256 (&r)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}
#endif

// x rows [m, m + R) x columns [k0, k0 + kc) as [kc][R].
void pack_rows(const float* x, int64_t K, int64_t m, int R, int64_t k0, int64_t kc, float* out) {
  for (int r = 0; r < R; ++r) {
    const float* row = x + (m + r) * K + k0;
    for (int64_t k = 0; k < kc; ++k) out[k * R + r] = row[k];
  }
}

// The weights' rows as fp32, 8 consecutive columns at a time (k a multiple of 8) or one.
struct Bf16Weights {
  const uint16_t* w;
  int64_t K;
  float at(int64_t n, int64_t k) const { return bf16_to_f32(w[n * K + k]); }
#ifdef __AVX2__
  __m256 eight(int64_t n, int64_t k) const { return bf16x8(w + n * K + k); }
#endif
};

struct Mxfp4Weights {
  const uint8_t *packed, *scale;
  int64_t K;
  float at(int64_t n, int64_t k) const {
    const uint8_t b = packed[n * (K / 2) + k / 2];
    return kE2M1[(k & 1) ? b >> 4 : b & 0xF] * kPow2.full[scale[n * (K / 32) + k / 32]];
  }
#ifdef __AVX2__
  // Lane j takes nibble j of the 4 code bytes (column k + j); the 16-entry table is two 8-entry
  // permutes, chosen by the code's sign bit; the power-of-two scale keeps every value exact.
  __m256 eight(int64_t n, int64_t k) const {
    int32_t bytes;
    std::memcpy(&bytes, packed + n * (K / 2) + k / 2, 4);
    const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(bytes), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                         _mm256_set1_epi32(0xF));
    const __m256 pos = _mm256_permutevar8x32_ps(_mm256_loadu_ps(kE2M1), idx);
    const __m256 neg = _mm256_permutevar8x32_ps(_mm256_loadu_ps(kE2M1 + 8), idx);
    const __m256 v = _mm256_blendv_ps(pos, neg, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    return _mm256_mul_ps(v, _mm256_set1_ps(kPow2.full[scale[n * (K / 32) + k / 32]]));
  }
#endif
};

// Weight rows [n0, n0 + C) x columns [k0, k0 + kc) as fp32 [kc][C]; rows past N are zeros.
template <int C, class Weights>
void pack_panel(const Weights& w, int64_t N, int64_t n0, int64_t k0, int64_t kc, float* panel) {
  int64_t k = 0;
#ifdef __AVX2__
  if (g_simd >= 1 && n0 + C <= N)
    for (int part = 0; part < C / 8; ++part)
      for (k = 0; k + 8 <= kc; k += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = w.eight(n0 + part * 8 + i, k0 + k);
        transpose8(r);
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(panel + (k + j) * C + part * 8, r[j]);
      }
#endif
  for (int c = 0; c < C; ++c)
    for (int64_t j = k; j < kc; ++j) panel[j * C + c] = n0 + c < N ? w.at(n0 + c, k0 + j) : 0.f;
}

// A bf16 weight [N, K] as the packers read it, checked.
inline Bf16Weights bf16_weights(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kBFloat16 && w.is_contiguous(), "w must be contiguous bf16 [N, K]");
  return {reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>()), w.size(1)};
}

// MXFP4 codes [N, K/2] and E8M0 scales [N, K/32] as the packers read them, checked.
inline Mxfp4Weights mxfp4_weights(const at::Tensor& packed, const at::Tensor& scale) {
  check_packed(packed, scale);
  return {packed.data_ptr<uint8_t>(), scale.data_ptr<uint8_t>(), packed.size(1) * 2};
}

// y [M, N] = x [M, K] @ W^T for N weight rows, x checked against W's depth, through one GEMM driver
// (gemm.cpp's fp32 one, gemm_dot.cpp's bf16 dot-product one).
template <class Weights>
using GemmDriver = void (*)(const float* x, const Weights& w, int64_t M, int64_t K, int64_t N, float* y);

template <class Weights>
at::Tensor gemm_product(const at::Tensor& x, const Weights& w, int64_t N, GemmDriver<Weights> driver) {
  check_x(x, w.K);
  auto y = at::empty({x.size(0), N}, x.options());
  driver(x.data_ptr<float>(), w, x.size(0), w.K, N, y.data_ptr<float>());
  return y;
}

}  // namespace

}  // namespace k3
