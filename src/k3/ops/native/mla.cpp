// mla_paged_decode: absorbed MLA attention for one new token per sequence, reading every sequence's cached
// latents in place from the paged pool (no gather, no cast of the cache). Reference:
// k3.ops.mla.paged.mla_paged_decode_reference.
//   score[h, s] = q[i, h] . row_s * scale        (row_s = [c_kv_s, k_x_s], q = [W_UK^T q_nope, q_x])
//   o[i, h]     = sum_s softmax_s(score[h, :]) c_kv_s
// Shapes: q fp32 [n, H, W]; pool fp32 or bf16 [rows, W] (W = R + Dr); tables int32 [n, maxb] (block ids);
// lens int32 [n] (positions 0..lens[i]-1 attended); row of position p: tables[i][p / bs] * bs + p % bs.
// A sequence's positions are split into at most 8 parts by its own length only (so its result never
// depends on its batchmates); parts run on OpenMP threads with an online softmax and are merged.
#include "k3.h"

namespace k3 {

namespace {

constexpr int64_t kTile = 16;       // positions scored together (their rows and scores stay in L1)
constexpr int64_t kMaxParts = 8;
constexpr int64_t kPartMin = 512;   // positions per part at least
constexpr int64_t kLanes = 8;       // heads per vector: heads are padded to a multiple of 8

#ifdef __AVX2__
// exp(x) for 8 lanes (Cephes' expf: x = n ln2 + r, a degree-6 polynomial in r, 2^n from the exponent
// bits); relative error about 2e-7 for x <= 0 (below -87 it returns ~0).
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
#endif

// x[i] = exp(x[i] - m[i]) for i < n (n a multiple of 8).
void exp_minus(float* x, const float* m, int64_t n) {
  int64_t i = 0;
#ifdef __AVX2__
  if (g_simd >= 1)
    for (; i < n; i += 8) _mm256_storeu_ps(x + i, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(m + i))));
#endif
  for (; i < n; ++i) x[i] = std::exp(x[i] - m[i]);
}

// score_tile / accumulate_tile on 16-lane vectors: Hp a multiple of 16, 16 or 8 rows (scores) or 4 or 2
// heads x 64 values (accumulation) per block; the callers handle what is left with the 8-lane or scalar
// forms. Each score and each sum is the same FMA chain whatever the block.
// S[j][h] for Rows rows, all Hp heads: value(j, k) reads row j's k-th value; ahead (or nullptr), the
// next rows' bytes to prefetch, a line per step of the first head group.
template <int Rows, class Value>
K3_AVX512 inline void score_rows_avx512(Value value, const char* ahead, const float* qT, int64_t W, int64_t Hp,
                                        float* S) {
  for (int64_t g = 0; g < Hp; g += 16) {
    __m512 a[Rows];
    for (int j = 0; j < Rows; ++j) a[j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < W; ++k) {
      if (ahead != nullptr && g == 0 && k * 16 < Rows * W) _mm_prefetch(ahead + k * 64, _MM_HINT_T1);
      const __m512 qv = _mm512_loadu_ps(qT + k * Hp + g);
      for (int j = 0; j < Rows; ++j) a[j] = _mm512_fmadd_ps(_mm512_set1_ps(value(j, k)), qv, a[j]);
    }
    for (int j = 0; j < Rows; ++j) _mm512_storeu_ps(S + j * Hp + g, a[j]);
  }
}

inline bool packed_rows(const float* const* rows, int64_t n, int64_t W) {
  for (int64_t j = 1; j < n; ++j)
    if (rows[j] != rows[0] + j * W) return false;
  return true;
}

K3_AVX512 int64_t score_tile_avx512(const float* const* rows, int64_t nt, const float* qT, int64_t W, int64_t Hp,
                                    float* S) {
  int64_t j0 = 0;
  // 16 rows laid out one after another, W known when compiled: one base pointer and constant offsets (16
  // row pointers do not fit the general registers, and their spills cost a move per FMA). K3's latent
  // rows are 576 wide (512 + 64). The next tile (when its positions follow in the same block) is
  // prefetched as this one is scored: read a column at a time across 16 rows, the rows were not fetched
  // ahead otherwise (faster than the 8-row form on long histories).
  constexpr int64_t kK3Width = 576;
  if (W == kK3Width && nt == 16 && packed_rows(rows, 16, W)) {
    const float* r = rows[0];
    score_rows_avx512<16>([r](int j, int64_t k) { return r[j * kK3Width + k]; },
                          reinterpret_cast<const char*>(r + 16 * kK3Width), qT, kK3Width, Hp, S);
    return 16;
  }
  for (; j0 + 8 <= nt; j0 += 8) {
    const float* const* r = rows + j0;
    score_rows_avx512<8>([r](int j, int64_t k) { return r[j][k]; }, nullptr, qT, W, Hp, S + j0 * Hp);
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

// S[j][h] = rows[j] . qT[:, h] for j < nt, all Hp heads: heads run across vector lanes, so no
// horizontal sums; 8 rows at a time give 8 independent accumulators per head group.
void score_tile(const float* const* rows, int64_t nt, const float* qT, int64_t W, int64_t Hp, float* S) {
  int64_t j0 = g_simd >= 2 && Hp % 16 == 0 ? score_tile_avx512(rows, nt, qT, W, Hp, S) : 0;
#ifdef __AVX2__
  if (g_simd >= 1) {
    for (; j0 + 8 <= nt; j0 += 8) {
      const float* r0 = rows[j0]; const float* r1 = rows[j0 + 1]; const float* r2 = rows[j0 + 2]; const float* r3 = rows[j0 + 3];
      const float* r4 = rows[j0 + 4]; const float* r5 = rows[j0 + 5]; const float* r6 = rows[j0 + 6]; const float* r7 = rows[j0 + 7];
      for (int64_t g = 0; g < Hp; g += 8) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        for (int64_t k = 0; k < W; ++k) {
          const __m256 qv = _mm256_loadu_ps(qT + k * Hp + g);
          a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(r0 + k), qv, a0);
          a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(r1 + k), qv, a1);
          a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(r2 + k), qv, a2);
          a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(r3 + k), qv, a3);
          a4 = _mm256_fmadd_ps(_mm256_broadcast_ss(r4 + k), qv, a4);
          a5 = _mm256_fmadd_ps(_mm256_broadcast_ss(r5 + k), qv, a5);
          a6 = _mm256_fmadd_ps(_mm256_broadcast_ss(r6 + k), qv, a6);
          a7 = _mm256_fmadd_ps(_mm256_broadcast_ss(r7 + k), qv, a7);
        }
        float* out = S + j0 * Hp + g;
        _mm256_storeu_ps(out, a0), _mm256_storeu_ps(out + Hp, a1), _mm256_storeu_ps(out + 2 * Hp, a2);
        _mm256_storeu_ps(out + 3 * Hp, a3), _mm256_storeu_ps(out + 4 * Hp, a4), _mm256_storeu_ps(out + 5 * Hp, a5);
        _mm256_storeu_ps(out + 6 * Hp, a6), _mm256_storeu_ps(out + 7 * Hp, a7);
      }
    }
  }
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

template <typename T>
const float* as_f32_row(const T* row, int64_t W, float* scratch);
template <>
const float* as_f32_row<float>(const float* row, int64_t, float*) { return row; }
template <>
const float* as_f32_row<uint16_t>(const uint16_t* row, int64_t W, float* scratch) {
  for (int64_t k = 0; k < W; ++k) scratch[k] = bf16_to_f32(row[k]);
  return scratch;
}

struct Scratch {
  std::vector<float> qT, S, rows, mt, f;
  void fit(int64_t W, int64_t Hp) {
    qT.resize(W * Hp), S.resize(kTile * Hp), rows.resize(kTile * W), mt.resize(Hp), f.resize(Hp);
  }
};

struct Part {
  int64_t seq, start, stop;
};

// One part: running max m[H], sum l[H] and unnormalised output acc[H, R] over positions [start, stop),
// an online softmax with every head's scores side by side.
template <typename T>
void attend_part(const float* q, const T* pool, const int32_t* table, int64_t bs, int64_t H, int64_t W, int64_t R,
                 float scale, const Part& part, float* m_out, float* l_out, float* acc) {
  thread_local Scratch sc;
  // 16-lane score tiles only when there are more than 8 heads: padding 8 heads to 16 would double the work.
  const int64_t lanes = g_simd >= 2 && H > kLanes ? 16 : kLanes;
  const int64_t Hp = (H + lanes - 1) / lanes * lanes;
  sc.fit(W, Hp);
  std::fill(sc.qT.begin(), sc.qT.end(), 0.f);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t k = 0; k < W; ++k) sc.qT[k * Hp + h] = q[h * W + k] * scale;
  std::vector<float> m(Hp, -INFINITY), l(Hp, 0.f);
  std::fill(acc, acc + H * R, 0.f);
  const float* rows[kTile];
  for (int64_t t0 = part.start; t0 < part.stop; t0 += kTile) {
    const int64_t nt = std::min(kTile, part.stop - t0);
    for (int64_t j = 0; j < nt; ++j) {
      const int64_t p = t0 + j;
      rows[j] = as_f32_row(pool + (static_cast<int64_t>(table[p / bs]) * bs + p % bs) * W, W, sc.rows.data() + j * W);
    }
    float* S = sc.S.data();
    score_tile(rows, nt, sc.qT.data(), W, Hp, S);
    for (int64_t h = 0; h < Hp; ++h) {
      float mx = m[h];
      for (int64_t j = 0; j < nt; ++j) mx = std::max(mx, S[j * Hp + h]);
      sc.mt[h] = mx;
      sc.f[h] = std::exp(m[h] - mx);   // 0 on the first tile (m = -inf), 1 when the max holds
    }
    for (int64_t h = 0; h < H; ++h)
      if (sc.f[h] != 1.f) {
        l[h] *= sc.f[h];
        for (int64_t r = 0; r < R; ++r) acc[h * R + r] *= sc.f[h];
      }
    for (int64_t j = 0; j < nt; ++j) {
      exp_minus(S + j * Hp, sc.mt.data(), Hp);
      for (int64_t h = 0; h < H; ++h) l[h] += S[j * Hp + h];
    }
    std::copy(sc.mt.begin(), sc.mt.end(), m.begin());
    accumulate_tile(rows, nt, S, Hp, H, R, acc);
  }
  std::copy(m.begin(), m.begin() + H, m_out);
  std::copy(l.begin(), l.begin() + H, l_out);
}

template <typename T>
void paged_decode(const float* q, const T* pool, const int32_t* tables, int64_t maxb, const std::vector<Part>& parts,
                  const std::vector<int64_t>& first_part, int64_t n, int64_t bs, int64_t H, int64_t W, int64_t R,
                  float scale, float* out) {
  const int64_t P = static_cast<int64_t>(parts.size());
  std::vector<float> m(P * H), l(P * H), acc(P * H * R);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < P; ++i) {
    const Part& part = parts[i];
    attend_part(q + part.seq * H * W, pool, tables + part.seq * maxb, bs, H, W, R, scale, part,
                m.data() + i * H, l.data() + i * H, acc.data() + i * H * R);
  }
#pragma omp parallel for schedule(static)
  for (int64_t sh = 0; sh < n * H; ++sh) {
    const int64_t s = sh / H, h = sh % H, p0 = first_part[s], p1 = first_part[s + 1];
    float mx = -INFINITY, total = 0.f;
    for (int64_t p = p0; p < p1; ++p) mx = std::max(mx, m[p * H + h]);
    float* o = out + sh * R;
    std::fill(o, o + R, 0.f);
    for (int64_t p = p0; p < p1; ++p) {
      const float f = std::exp(m[p * H + h] - mx);
      total += l[p * H + h] * f;
      const float* a = acc.data() + (p * H + h) * R;
      for (int64_t r = 0; r < R; ++r) o[r] += f * a[r];
    }
    const float inv = 1.0f / total;
    for (int64_t r = 0; r < R; ++r) o[r] *= inv;
  }
}

}  // namespace

at::Tensor mla_paged_decode(at::Tensor q, at::Tensor pool, at::Tensor tables, at::Tensor lens,
                               int64_t block_size, int64_t rank, double scale) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == at::kFloat && q.is_contiguous(), "q must be contiguous fp32 [n, H, W]");
  const int64_t n = q.size(0), H = q.size(1), W = q.size(2), R = rank;
  TORCH_CHECK(pool.dim() == 2 && pool.size(1) == W && pool.is_contiguous() &&
              (pool.scalar_type() == at::kFloat || pool.scalar_type() == at::kBFloat16),
              "pool must be contiguous fp32 or bf16 [rows, ", W, "]");
  TORCH_CHECK(tables.dim() == 2 && tables.size(0) == n && tables.scalar_type() == at::kInt && tables.is_contiguous(),
              "tables must be contiguous int32 [n, max_blocks]");
  TORCH_CHECK(lens.dim() == 1 && lens.size(0) == n && lens.scalar_type() == at::kInt && lens.is_contiguous(),
              "lens must be contiguous int32 [n]");
  TORCH_CHECK(block_size >= 1 && 0 < R && R <= W, "bad block_size or rank");
  const int64_t maxb = tables.size(1), num_blocks = pool.size(0) / block_size;
  const int32_t* tp = tables.data_ptr<int32_t>();
  const int32_t* lp = lens.data_ptr<int32_t>();
  std::vector<Part> parts;
  std::vector<int64_t> first_part(n + 1, 0);
  for (int64_t s = 0; s < n; ++s) {
    const int64_t len = lp[s];
    TORCH_CHECK(len >= 1 && len <= maxb * block_size, "lens[", s, "] = ", len, " is outside 1..", maxb * block_size);
    for (int64_t b = 0; b < (len + block_size - 1) / block_size; ++b)
      TORCH_CHECK(tp[s * maxb + b] >= 0 && tp[s * maxb + b] < num_blocks, "tables[", s, "] names a block outside the pool");
    const int64_t count = std::min(kMaxParts, std::max<int64_t>(1, len / kPartMin));
    const int64_t step = (len + count - 1) / count;
    first_part[s] = static_cast<int64_t>(parts.size());
    for (int64_t a = 0; a < len; a += step) parts.push_back({s, a, std::min(len, a + step)});
  }
  first_part[n] = static_cast<int64_t>(parts.size());
  auto out = at::empty({n, H, R}, q.options());
  const float sc = static_cast<float>(scale);
  if (pool.scalar_type() == at::kFloat)
    paged_decode(q.data_ptr<float>(), pool.data_ptr<float>(), tp, maxb, parts, first_part, n, block_size, H, W, R, sc,
                 out.data_ptr<float>());
  else
    paged_decode(q.data_ptr<float>(), reinterpret_cast<const uint16_t*>(pool.data_ptr<at::BFloat16>()), tp, maxb, parts,
                 first_part, n, block_size, H, W, R, sc, out.data_ptr<float>());
  return out;
}

}  // namespace k3
