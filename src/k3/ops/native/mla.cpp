// mla_paged_decode: absorbed MLA attention for one new token per sequence, reading every sequence's cached
// latents in place from the paged pool (no gather, no cast of the cache). Reference:
// k3.ops.mla.paged.mla_paged_decode_reference.
//   score[h, s] = q[i, h] . row_s * scale        (row_s = [c_kv_s, k_x_s], q = [W_UK^T q_nope, q_x])
//   o[i, h]     = sum_s softmax_s(score[h, :]) c_kv_s
// Shapes: q fp32 [n, H, W]; pool fp32 or bf16 [rows, W] (W = R + Dr); tables int32 [n, maxb] (block ids);
// lens int32 [n] (positions 0..lens[i]-1 attended); row of position p: tables[i][p / bs] * bs + p % bs.
// A sequence's positions are split into at most 8 parts by its own length and the head count only (so its
// result never depends on its batchmates); parts run on OpenMP threads with an online softmax and are
// merged. Each part walks its positions in tiles of 32: score every head, one online-softmax step, then
// accumulate the tile's rows, which are still in cache. Kernel timings: the ops and engine benchmarks.
#include "k3.h"
#include "mla_tiles.h"

namespace k3 {

namespace {

constexpr int64_t kTile = 32;       // positions scored, then accumulated, together
constexpr int64_t kMaxParts = 8;
constexpr int64_t kPartWork = 8192; // positions x heads per part at least (512 positions at 16 heads)
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

// One tile's online-softmax step, heads inner so the loops run across vector lanes: the running max
// m[h] takes the tile's scores S[j][h] (j < nt), f[h] = exp(m_old - m_new) rescales what came before
// (0 on the first tile, 1 when the max holds), S becomes exp(S - m_new), and l[h] = l[h] f[h] + sum_j S[j][h].
void online_softmax_tile(float* S, int64_t nt, int64_t Hp, float* m, float* l, float* mt, float* f) {
  std::copy(m, m + Hp, mt);
  for (int64_t j = 0; j < nt; ++j)
    for (int64_t h = 0; h < Hp; ++h) mt[h] = std::max(mt[h], S[j * Hp + h]);
  std::copy(m, m + Hp, f);
  exp_minus(f, mt, Hp);
  for (int64_t h = 0; h < Hp; ++h) l[h] *= f[h];
  for (int64_t j = 0; j < nt; ++j) {
    exp_minus(S + j * Hp, mt, Hp);
    for (int64_t h = 0; h < Hp; ++h) l[h] += S[j * Hp + h];
  }
  std::copy(mt, mt + Hp, m);
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

// Positions [start, start + n)'s rows in the pool (position p: row tables[p / bs] * bs + p % bs of the
// sequence's table), walking the blocks: two divisions a tile, not two a row (a division by a block size
// known only at run time costs tens of cycles, as much as scoring a short row).
template <typename T>
void pool_rows(const T* pool, const int32_t* table, int64_t bs, int64_t W, int64_t start, int64_t n, const T** out) {
  int64_t b = start / bs, off = start % bs;
  for (int64_t j = 0; j < n; ++j) {
    out[j] = pool + (static_cast<int64_t>(table[b]) * bs + off) * W;
    if (++off == bs) off = 0, ++b;
  }
}

// The row to prefetch: the row itself where the pool is read in place (fp32); nullptr where it is read
// through a widened copy (bf16).
inline const float* in_place(const float* row) { return row; }
inline const float* in_place(const uint16_t*) { return nullptr; }

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
  const float* ahead[kTile];
  const T* here[kTile];   // this tile's rows in the pool, then the next tile's
  const T* next[kTile];
  pool_rows(pool, table, bs, W, part.start, std::min(kTile, part.stop - part.start), here);
  for (int64_t t0 = part.start; t0 < part.stop; t0 += kTile) {
    const int64_t nt = std::min(kTile, part.stop - t0), after = std::max<int64_t>(0, std::min(kTile, part.stop - t0 - kTile));
    for (int64_t j = 0; j < nt; ++j) rows[j] = as_f32_row(here[j], W, sc.rows.data() + j * W);
    pool_rows(pool, table, bs, W, t0 + kTile, after, next);
    for (int64_t j = 0; j < kTile; ++j) ahead[j] = j < after ? in_place(next[j]) : nullptr;
    float* S = sc.S.data();
    score_tile(rows, ahead, nt, sc.qT.data(), W, Hp, S);
    online_softmax_tile(S, nt, Hp, m.data(), l.data(), sc.mt.data(), sc.f.data());
    for (int64_t h = 0; h < H; ++h)
      if (sc.f[h] != 1.f)
        for (int64_t r = 0; r < R; ++r) acc[h * R + r] *= sc.f[h];
    accumulate_tile(rows, nt, S, Hp, H, R, acc);
    std::copy(next, next + after, here);
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
    // Parts by work (positions x heads: the model's head count, never the batch), each a whole number
    // of tiles so that every tile but a part's last reads whole blocks.
    const int64_t count = std::min(kMaxParts, std::max<int64_t>(1, len * H / kPartWork));
    const int64_t step = ((len + count - 1) / count + kTile - 1) / kTile * kTile;
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
