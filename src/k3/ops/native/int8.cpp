// Opt-in int8 activations for the MXFP4 products (set_int8_activations(true)): each 32-column group of
// x is rounded to int8 with its own scale max|x|/127, multiplied by the E2M1 x 2 codes as integers
// (AVX2 maddubs), and the int32 sum is scaled once per group. Faster than the exact path (no float
// widening per weight), at a cost bounded per output by
//   sum over groups g of  2^(s_g - 127) * sum_j |E2M1_j| * (max|x_g| / 254)
// plus fp32 rounding; tests/ops/test_native.py checks every output against that bound.
// Sources are joined in order: this file comes before mxfp4.cpp, which calls mxfp4_rows_int8.

namespace {

bool g_int8 = false;

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

}  // namespace

// Turns the int8-activation MXFP4 path on or off for every later call; returns the previous setting.
bool set_int8_activations(bool on) {
  const bool was = g_int8;
  g_int8 = on;
  return was;
}
