// Dot products of packed MXFP4 rows (E2M1 codes [K/2], two per byte, column 2j in the low nibble; E8M0
// scales [K/32]) with fp32 activations, per instruction set. Every form equals the dequantised product up
// to fp32 summation order: the scale is a power of two, applied exactly to each group's partial sum. Within
// one instruction set, an output's sum is the same bits whichever form computes it (one W row, four W
// rows, four x rows), so a row's result never depends on its batch.
//
// The SIMD forms take the activations split per group of 32 columns: its 16 even columns, then its 16 odd
// ones (MxActivations), matching codes decoded as low nibbles and high nibbles.
//
// AVX2: one 32-lane byte shuffle turns 32 nibbles into E2M1 x 2 (exact int8), stored to an L1 buffer and
// widened from there (CodePair). AVX-512: codes are zero-extended into 32-bit lanes and looked up in a
// 16-entry fp32 table with one permute per 16 weights (the permute reads the low four bits).
#pragma once
#include "mxfp4.h"

namespace k3 {

namespace {

float dot_mxfp4_scalar(const uint8_t* packed, const uint8_t* scale, const float* x, int64_t K) {
  float s = 0.f;
  for (int64_t g = 0; g < K / 32; ++g) {
    float part = 0.f;
    for (int j = 0; j < 16; ++j) {
      const uint8_t b = packed[g * 16 + j];
      part += kE2M1x2[b & 0xF] * x[g * 32 + 2 * j] + kE2M1x2[b >> 4] * x[g * 32 + 2 * j + 1];
    }
    s += part * kPow2.half[scale[g]];
  }
  return s;
}

#ifdef __AVX2__
// Two groups' codes as E2M1 x 2 int8: even[16 h + j] and odd[16 h + j] are columns 2j and 2j + 1 of group h.
struct CodePair {
  alignas(32) int8_t even[32];
  alignas(32) int8_t odd[32];
};

// 32 bytes of codes (groups g, g + 1) into c: one shuffle per nibble half, each lane a group.
inline void decode_pair_avx2(const uint8_t* packed, CodePair& c) {
  const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kE2M1x2)));
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed));
  _mm256_store_si256(reinterpret_cast<__m256i*>(c.even), _mm256_shuffle_epi8(lut, _mm256_and_si256(v, low4)));
  _mm256_store_si256(reinterpret_cast<__m256i*>(c.odd), _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4)));
}

// A last, unpaired group (16 bytes) into c's first half.
inline void decode_one_avx2(const uint8_t* packed, CodePair& c) {
  const __m128i lut = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kE2M1x2)), low4 = _mm_set1_epi8(0x0F);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  _mm_store_si128(reinterpret_cast<__m128i*>(c.even), _mm_shuffle_epi8(lut, _mm_and_si128(v, low4)));
  _mm_store_si128(reinterpret_cast<__m128i*>(c.odd), _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(v, 4), low4)));
}

// Between decoding and widening: a compiler barrier, so the widening reads the buffer (vpmovsxbd from
// memory) rather than extracting each 8 bytes from the shuffle's register first, a shuffle uop more per
// 8 weights.
inline void codes_stored() { asm volatile("" ::: "memory"); }

inline __m256 widen8(const int8_t* codes) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes))));
}

// Group h of c widened to fp32: its even columns (two vectors), then its odd ones.
struct Widened {
  __m256 v[4];
  Widened(const CodePair& c, int h)
      : v{widen8(c.even + 16 * h), widen8(c.even + 16 * h + 8), widen8(c.odd + 16 * h), widen8(c.odd + 16 * h + 8)} {}
};

// acc + scale * (a widened group times its split activations xs [32]): the one order every AVX2 form uses.
inline __m256 group_avx2(const Widened& w, const float* xs, float scale, __m256 acc) {
  __m256 part = _mm256_mul_ps(w.v[0], _mm256_loadu_ps(xs));
  part = _mm256_fmadd_ps(w.v[1], _mm256_loadu_ps(xs + 8), part);
  part = _mm256_fmadd_ps(w.v[2], _mm256_loadu_ps(xs + 16), part);
  part = _mm256_fmadd_ps(w.v[3], _mm256_loadu_ps(xs + 24), part);
  return _mm256_fmadd_ps(part, _mm256_set1_ps(scale), acc);
}

inline __m256 group_avx2(const CodePair& c, int h, const float* xs, float scale, __m256 acc) {
  return group_avx2(Widened(c, h), xs, scale, acc);
}

// R consecutive rows of W (row stride K/2 codes, K/32 scales) times one split row of x. R > 1 keeps R
// accumulator chains and R decodes in flight. Besides the near prefetch, the row R ahead (of the rows_left
// from this one to the end of W) is prefetched at the same column: with R = 4 the near one falls inside
// the rows being read. Faster from DRAM than the one-row loop with the decode from a register.
template <int R>
void dot_mxfp4_avx2_rows(const uint8_t* packed, const uint8_t* scale, const float* xs, int64_t K, int64_t rows_left,
                         float* out) {
  const int64_t groups = K / 32, ps = K / 2, ss = K / 32;
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  CodePair c[R];
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = packed + r * ps + g * 16;
      if ((g & 3) == 0) prefetch_ahead<kPrefetchMxfp4>(p);
      if ((g & 3) == 0 && R > 1 && r + R < rows_left) _mm_prefetch(reinterpret_cast<const char*>(p + R * ps), _MM_HINT_T0);
      decode_pair_avx2(p, c[r]);
    }
    codes_stored();
    for (int r = 0; r < R; ++r) {
      acc[r] = group_avx2(c[r], 0, xs + g * 32, kPow2.half[scale[r * ss + g]], acc[r]);
      acc[r] = group_avx2(c[r], 1, xs + g * 32 + 32, kPow2.half[scale[r * ss + g + 1]], acc[r]);
    }
  }
  if (g < groups) {
    for (int r = 0; r < R; ++r) decode_one_avx2(packed + r * ps + g * 16, c[r]);
    codes_stored();
    for (int r = 0; r < R; ++r) acc[r] = group_avx2(c[r], 0, xs + g * 32, kPow2.half[scale[r * ss + g]], acc[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
}

// One row of W times M split rows of x: each group pair decoded and widened once for all M.
template <int M>
void dotm_mxfp4_avx2(const uint8_t* packed, const uint8_t* scale, const float* const* xs, int64_t K, float* out) {
  const int64_t groups = K / 32;
  __m256 acc[M];
  for (int n = 0; n < M; ++n) acc[n] = _mm256_setzero_ps();
  CodePair c;
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    decode_pair_avx2(packed + g * 16, c);
    codes_stored();
    for (int h = 0; h < 2; ++h) {
      const Widened w(c, h);
      for (int n = 0; n < M; ++n) acc[n] = group_avx2(w, xs[n] + (g + h) * 32, kPow2.half[scale[g + h]], acc[n]);
    }
  }
  if (g < groups) {
    decode_one_avx2(packed + g * 16, c);
    codes_stored();
    const Widened w(c, 0);
    for (int n = 0; n < M; ++n) acc[n] = group_avx2(w, xs[n] + g * 32, kPow2.half[scale[g]], acc[n]);
  }
  for (int n = 0; n < M; ++n) out[n] = hsum(acc[n]);
}
#endif

// acc + one group of 32 weights times the matching split activations, scaled: [16] partial sums.
K3_AVX512 inline __m512 group_avx512(const uint8_t* packed, uint8_t scale, const float* x_split, __m512 lut, __m512 acc) {
  __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed)));
  __m512 part = _mm512_mul_ps(_mm512_permutexvar_ps(b, lut), _mm512_loadu_ps(x_split));
  part = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut), _mm512_loadu_ps(x_split + 16), part);
  return _mm512_fmadd_ps(part, _mm512_set1_ps(kPow2.full[scale]), acc);
}

// x_split: per group of 32 columns, the 16 even columns then the 16 odd ones.
K3_AVX512 float dot_mxfp4_avx512(const uint8_t* packed, const uint8_t* scale, const float* x_split, int64_t K) {
  const __m512 lut = _mm512_loadu_ps(kE2M1);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  const int64_t groups = K / 32;
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    if ((g & 3) == 0) prefetch_ahead<kPrefetchMxfp4>(packed + g * 16);  // once per 64-byte line of codes
    acc0 = group_avx512(packed + g * 16, scale[g], x_split + g * 32, lut, acc0);
    acc1 = group_avx512(packed + g * 16 + 16, scale[g + 1], x_split + g * 32 + 32, lut, acc1);
  }
  if (g < groups) acc0 = group_avx512(packed + g * 16, scale[g], x_split + g * 32, lut, acc0);
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// Activations [N, K] in the layout the selected dot expects: split per group for the SIMD forms.
struct MxActivations {
  const float* base;
  std::vector<float> split;
  MxActivations(const float* x, int64_t N, int64_t K) : base(x) {
    if (g_simd < 1) return;
    split.resize(N * K);
    for (int64_t i = 0; i < N * K; i += 32)
      for (int j = 0; j < 16; ++j) {
        split[i + j] = x[i + 2 * j];
        split[i + 16 + j] = x[i + 2 * j + 1];
      }
    base = split.data();
  }
};

// The same sums as dot_mxfp4_avx512 for M rows of x at once (split activations; decoded once per group).
template <int M>
K3_AVX512 void dotm_mxfp4_avx512(const uint8_t* packed, const uint8_t* scale, const float* const* x, int64_t K,
                                 float* out) {
  const __m512 lut = _mm512_loadu_ps(kE2M1);
  __m512 a0[M], a1[M];
  for (int n = 0; n < M; ++n) a0[n] = _mm512_setzero_ps(), a1[n] = _mm512_setzero_ps();
  const int64_t groups = K / 32;
  for (int64_t g = 0; g < groups; ++g) {
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + g * 16)));
    const __m512 lo = _mm512_permutexvar_ps(b, lut), hi = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut);
    const __m512 sc = _mm512_set1_ps(kPow2.full[scale[g]]);
    for (int n = 0; n < M; ++n) {
      const float* xs = x[n] + g * 32;
      __m512 part = _mm512_mul_ps(lo, _mm512_loadu_ps(xs));
      part = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xs + 16), part);
      // even groups into one accumulator, odd into the other, as dot_mxfp4_avx512 does
      if ((g & 1) == 0)
        a0[n] = _mm512_fmadd_ps(part, sc, a0[n]);
      else
        a1[n] = _mm512_fmadd_ps(part, sc, a1[n]);
    }
  }
  for (int n = 0; n < M; ++n) out[n] = _mm512_reduce_add_ps(_mm512_add_ps(a0[n], a1[n]));
}

// The same sums as dot_mxfp4_avx512 for 4 consecutive rows of W and one row of x (split): a lone row's
// two accumulator chains leave the FMA latency exposed, eight independent ones keep the units busy.
// Each row's groups go through group_avx512 in the one-row order, so its result is the same bits.
// Besides the near prefetch, the row kOuts4L2Rows ahead (of the rows_left from this one to the end of
// W) is prefetched at the same column (prefetch_far: into L2, or non-temporally): faster from DRAM, the
// same from cache.
constexpr int64_t kOuts4L2Rows = 16;
K3_AVX512 void dot_mxfp4_avx512_outs4(const uint8_t* packed, const uint8_t* scale, const float* x_split, int64_t K,
                                      int64_t rows_left, float* out) {
  const __m512 lut = _mm512_loadu_ps(kE2M1);
  const int64_t groups = K / 32, ps = K / 2, ss = K / 32;
  __m512 a0[4], a1[4];
  for (int r = 0; r < 4; ++r) a0[r] = _mm512_setzero_ps(), a1[r] = _mm512_setzero_ps();
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2)
    for (int r = 0; r < 4; ++r) {
      const uint8_t* p = packed + r * ps + g * 16;
      if ((g & 3) == 0) prefetch_ahead<kPrefetchMxfp4>(p);
      if ((g & 3) == 0 && r + kOuts4L2Rows < rows_left) prefetch_far(p + kOuts4L2Rows * ps);
      a0[r] = group_avx512(p, scale[r * ss + g], x_split + g * 32, lut, a0[r]);
      a1[r] = group_avx512(p + 16, scale[r * ss + g + 1], x_split + g * 32 + 32, lut, a1[r]);
    }
  if (g < groups)
    for (int r = 0; r < 4; ++r) a0[r] = group_avx512(packed + r * ps + g * 16, scale[r * ss + g], x_split + g * 32, lut, a0[r]);
  for (int r = 0; r < 4; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r]));
}

// One W row times one row of x in MxActivations' layout.
inline float dot_mxfp4(const uint8_t* packed, const uint8_t* scale, const float* x, int64_t K) {
  if (g_simd >= 2) return dot_mxfp4_avx512(packed, scale, x, K);
#ifdef __AVX2__
  if (g_simd >= 1) {
    float out;
    dot_mxfp4_avx2_rows<1>(packed, scale, x, K, 1, &out);
    return out;
  }
#endif
  return dot_mxfp4_scalar(packed, scale, x, K);
}

}  // namespace

}  // namespace k3
