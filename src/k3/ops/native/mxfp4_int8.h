// Opt-in int8 activations for the MXFP4 products (set_int8_activations(true)): each 32-column group of
// x is rounded to int8 with its own scale max|x|/127, multiplied by the E2M1 x 2 codes as integers
// (AVX-512 VNNI dpbusd where the CPU has it, else AVX2 maddubs), and the int32 sum is scaled once per
// group. Faster than the exact path (no float widening per weight), at a cost bounded per output by
//   sum over groups g of  2^(s_g - 127) * sum_j |E2M1_j| * (max|x_g| / 254)
// plus fp32 rounding; tests/ops/test_native.py checks every output against that bound.
// Part of the MXFP4 unit: only mxfp4.cpp includes this file (its helpers have internal linkage).
#pragma once
#include "mxfp4.h"

namespace k3 {

namespace {

bool g_int8 = false;   // set_int8_activations (mxfp4.cpp)

// x [N, K] -> int8 codes in the split layout (per group: 16 even columns, then 16 odd) and per-group
// scales (0 for an all-zero group).
void quantise_groups(const float* x, int64_t N, int64_t K, int8_t* q, float* scales) {
  for (int64_t i = 0; i < N * K; i += 32) {
    float m = 0.f;
    for (int j = 0; j < 32; ++j) m = std::max(m, std::fabs(x[i + j]));
    const float s = m / 127.f, inv = m > 0.f ? 127.f / m : 0.f;
    scales[i / 32] = s;
    for (int j = 0; j < 16; ++j) {
      q[i + j] = static_cast<int8_t>(std::nearbyint(x[i + 2 * j] * inv));
      q[i + 16 + j] = static_cast<int8_t>(std::nearbyint(x[i + 2 * j + 1] * inv));
    }
  }
}

#ifdef __AVX2__
float dot_int8_avx2(const uint8_t* packed, const uint8_t* scale, const int8_t* xq, const float* xs, int64_t K,
                    const float* half_pow2, const int8_t* lut16) {
  const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lut16)));
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t g = 0; g < K / 32; ++g) {
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + g * 16));
    __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), low4);
    __m256i w = _mm256_shuffle_epi8(lut, nib);  // E2M1 x 2 as int8: even columns, then odd
    __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + g * 32));
    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w)), ones);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(xs[g] * half_pow2[scale[g]]), acc);
  }
  return hsum(acc);
}
#endif

// AVX-512 with VNNI: one vpdpbusd multiplies 64 codes by 64 activations and sums them in fours into int32
// lanes. Its first operand is unsigned, so the codes are looked up as E2M1 x 2 + 12 (0..24) and each lane
// starts from -12 x the sum of its activations: it then holds the exact E2M1 x 2 dot product.
#define K3_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))
const bool kHasVnni = __builtin_cpu_supports("avx512vnni");
const int8_t kE2M1x2Biased[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
constexpr int64_t kInt8AheadRows = 16;  // the W row whose codes are prefetched into L2, as the exact form

// Rows of x quantised as quantise_groups rounds them (the same codes and scales), laid out for the VNNI
// kernel per 128-column block (4 groups; 64 code bytes of a W row): the 64 even columns' codes in code-byte
// order, then the 64 odd ones; per dword lane L (code bytes 4L..4L+3, so group L/4) -12 x the sum of its 8
// codes and half its group's scale (the weights are E2M1 x 2). The groups past the last whole block are
// read from the codes in column order.
struct Int8Blocks {
  int64_t N, K, blocks;
  std::vector<int8_t> natural;     // [N, K], column order
  std::vector<float> group_scale;  // [N, K / 32]
  std::vector<int8_t> codes;       // [N, blocks, 128]
  std::vector<int32_t> bias;       // [N, blocks, 16]
  std::vector<float> lane_scale;   // [N, blocks, 16]
  Int8Blocks(const float* x, int64_t N, int64_t K);
};

K3_AVX512_VNNI void quantise_blocks(Int8Blocks& q, const float* x) {
  const int64_t K = q.K, G = K / 32, B = q.blocks;
  const __m512i ones = _mm512_set1_epi8(1), group_of_lane = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  for (int64_t n = 0; n < q.N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      const float* xg = x + n * K + g * 32;
      const __m512 a = _mm512_loadu_ps(xg), b = _mm512_loadu_ps(xg + 16);
      const float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
      const bool nan = (_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q)) != 0;
      const __m512 inv = _mm512_set1_ps(m > 0.f ? 127.f / m : 0.f);
      q.group_scale[n * G + g] = nan ? NAN : m / 127.f;  // a NaN activation makes its outputs NaN
      int8_t* out = q.natural.data() + n * K + g * 32;  // rounded to nearest even, as nearbyint rounds
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(a, inv))));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(b, inv))));
    }
    for (int64_t b = 0; b < B; ++b) {
      const int8_t* nat = q.natural.data() + n * K + b * 128;
      const __m512i w0 = _mm512_loadu_si512(nat), w1 = _mm512_loadu_si512(nat + 64);  // column pairs as int16
      const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(w0)), _mm512_cvtepi16_epi8(w1), 1);
      const __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srli_epi16(w0, 8))),
                                            _mm512_cvtepi16_epi8(_mm512_srli_epi16(w1, 8)), 1);
      const int64_t at = n * B + b;
      _mm512_storeu_si512(q.codes.data() + at * 128, lo);
      _mm512_storeu_si512(q.codes.data() + at * 128 + 64, hi);
      const __m512i sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, lo), ones, hi);
      _mm512_storeu_si512(q.bias.data() + at * 16, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-12)));
      const __m512 scales = _mm512_castps128_ps512(_mm_loadu_ps(q.group_scale.data() + n * G + 4 * b));
      _mm512_storeu_ps(q.lane_scale.data() + at * 16, _mm512_mul_ps(_mm512_permutexvar_ps(group_of_lane, scales), _mm512_set1_ps(0.5f)));
    }
  }
}

Int8Blocks::Int8Blocks(const float* x, int64_t N, int64_t K)
    : N(N), K(K), blocks(K / 128), natural(N * K), group_scale(N * K / 32), codes(N * blocks * 128),
      bias(N * blocks * 16), lane_scale(N * blocks * 16) {
  quantise_blocks(*this, x);
}

// An E8M0 scale byte's value: 2^(s - 127), NaN for 255.
inline float e8m0_value(int s) { return s == 255 ? NAN : std::ldexp(1.0f, s - 127); }

// pow2_lanes for scale bytes that include 0 or 255, looked up one by one (kept out of line: the kernel's
// loop stays free of its stack frame).
K3_AVX512_VNNI __attribute__((noinline, cold)) __m512 pow2_lanes_special(const uint8_t* scale) {
  alignas(64) float lanes[16];
  for (int L = 0; L < 16; ++L) lanes[L] = e8m0_value(scale[L / 4]);
  return _mm512_load_ps(lanes);
}

// Whether n scale bytes avoid 0 and 255, the two values pow2_lanes' exponent-bit form cannot express.
K3_AVX512_VNNI bool scales_plain(const uint8_t* scale, int64_t n) {
  const __m512i zero = _mm512_setzero_si512(), full = _mm512_set1_epi8(-1);
  for (int64_t i = 0; i < n; i += 64) {
    const __mmask64 in = n - i >= 64 ? ~0ULL : (1ULL << (n - i)) - 1;
    const __m512i v = _mm512_maskz_loadu_epi8(in, scale + i);
    if ((_mm512_mask_cmpeq_epi8_mask(in, v, zero) | _mm512_mask_cmpeq_epi8_mask(in, v, full)) != 0) return false;
  }
  return true;
}

// 2^(s - 127) per lane for a block's four scale bytes (lane L: byte L/4), built as exponent bits. Plain:
// the caller has checked that no byte is 0 or 255 (2^-127 and NaN, outside that form); otherwise each
// block is checked and those go to pow2_lanes_special.
template <bool Plain>
K3_AVX512_VNNI __attribute__((always_inline)) inline __m512 pow2_lanes(const uint8_t* scale) {
  uint32_t s4;
  std::memcpy(&s4, scale, 4);
  if (!Plain) {
    const uint32_t zero = (s4 - 0x01010101u) & ~s4 & 0x80808080u, full = (~s4 - 0x01010101u) & s4 & 0x80808080u;
    if ((zero | full) != 0) return pow2_lanes_special(scale);
  }
  const __m512i spread = _mm512_set_epi32(  // lane L <- byte L/4 (vpshufb works within 128-bit lanes)
      0x80808003, 0x80808003, 0x80808003, 0x80808003, 0x80808002, 0x80808002, 0x80808002, 0x80808002,
      0x80808001, 0x80808001, 0x80808001, 0x80808001, 0x80808000, 0x80808000, 0x80808000, 0x80808000);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_shuffle_epi8(_mm512_set1_epi32(static_cast<int>(s4)), spread), 23));
}

// R consecutive W rows (rows_left of them to the end of W) times row n of x: out[r] (Plain: see pow2_lanes;
// the same result either way). Each row is summed in one order whatever R is (its blocks in 16 lanes, the lanes, then the groups past the last block in
// order), so a row's result does not depend on the rows computed with it.
template <int R, bool Plain>
K3_AVX512_VNNI void dot_int8_vnni_rows(const uint8_t* packed, const uint8_t* scale, const Int8Blocks& x, int64_t n,
                                       int64_t rows_left, float* out) {
  const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kE2M1x2Biased)));
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const int64_t K = x.K, ps = K / 2, ss = K / 32, B = x.blocks;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t at = n * B + b;
    const __m512i lo = _mm512_loadu_si512(x.codes.data() + at * 128), hi = _mm512_loadu_si512(x.codes.data() + at * 128 + 64);
    const __m512i bias = _mm512_loadu_si512(x.bias.data() + at * 16);
    const __m512 xs = _mm512_loadu_ps(x.lane_scale.data() + at * 16);
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = packed + r * ps + b * 64;
      prefetch_ahead<kPrefetchMxfp4>(p);
      if (r + kInt8AheadRows < rows_left) prefetch_far(p + kInt8AheadRows * ps);
      const __m512i v = _mm512_loadu_si512(p);
      __m512i dot = _mm512_dpbusd_epi32(bias, _mm512_shuffle_epi8(lut, _mm512_and_si512(v, low4)), lo);
      dot = _mm512_dpbusd_epi32(dot, _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4)), hi);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(pow2_lanes<Plain>(scale + r * ss + 4 * b), xs), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float sum = _mm512_reduce_add_ps(acc[r]);
    for (int64_t g = 4 * B; g < K / 32; ++g) {  // the groups past the last block, in column order
      const uint8_t* c = packed + r * ps + g * 16;
      const int8_t* xq = x.natural.data() + n * K + g * 32;
      int32_t dot = 0;
      for (int j = 0; j < 16; ++j)
        dot += (kE2M1x2Biased[c[j] & 0xF] - 12) * xq[2 * j] + (kE2M1x2Biased[c[j] >> 4] - 12) * xq[2 * j + 1];
      sum += static_cast<float>(dot) * (0.5f * x.group_scale[n * (K / 32) + g] * e8m0_value(scale[r * ss + g]));
    }
    out[r] = sum;
  }
}

}  // namespace

}  // namespace k3
