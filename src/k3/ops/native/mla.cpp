// mla_paged_decode: absorbed MLA attention for one new token per sequence, reading every sequence's cached
// latents in place from the paged pool (no gather, no cast of the cache). Reference:
// k3.ops.mla.paged.mla_paged_decode_reference.
//   score[h, s] = q[i, h] . row_s * scale        (row_s = [c_kv_s, k_x_s], q = [W_UK^T q_nope, q_x])
//   o[i, h]     = sum_s softmax_s(score[h, :]) c_kv_s
// Shapes: q fp32 [n, H, W]; pool fp32 or bf16 [rows, W] (W = R + Dr); tables int32 [n, maxb] (block ids);
// lens int32 [n] (positions 0..lens[i]-1 attended); row of position p: tables[i][p / bs] * bs + p % bs.
// A sequence's positions are split into at most 8 parts by its own length only (so its result never
// depends on its batchmates); parts run on OpenMP threads with an online softmax and are merged.

namespace {

constexpr int64_t kTile = 32;       // positions scored together (scores stay in L1)
constexpr int64_t kMaxParts = 8;
constexpr int64_t kPartMin = 512;   // positions per part at least

inline float ld1(const float* p) { return *p; }
inline float ld1(const uint16_t* p) { return bf16_to_f32(*p); }
#ifdef __AVX2__
inline __m256 ld8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 ld8(const uint16_t* p) { return bf16x8(p); }
#endif

// out[j] = q . r[j] for the rows r[0..m) (m <= 4), n values each.
template <typename T>
void dot_rows(const float* q, const T* const* r, int m, int64_t n, float* out) {
  int64_t k = 0;
  float s[4] = {0.f, 0.f, 0.f, 0.f};
#ifdef __AVX2__
  if (g_simd >= 1 && m == 4) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (; k + 8 <= n; k += 8) {
      const __m256 qv = _mm256_loadu_ps(q + k);
      a0 = _mm256_fmadd_ps(qv, ld8(r[0] + k), a0);
      a1 = _mm256_fmadd_ps(qv, ld8(r[1] + k), a1);
      a2 = _mm256_fmadd_ps(qv, ld8(r[2] + k), a2);
      a3 = _mm256_fmadd_ps(qv, ld8(r[3] + k), a3);
    }
    s[0] = hsum(a0), s[1] = hsum(a1), s[2] = hsum(a2), s[3] = hsum(a3);
  }
#endif
  for (int j = 0; j < m; ++j) {
    float t = s[j];
    for (int64_t kk = k; kk < n; ++kk) t += q[kk] * ld1(r[j] + kk);
    out[j] = t;
  }
}

// y[0:n] += sum_j p[j] r[j][0:n] for m <= 4 rows.
template <typename T>
void axpy_rows(const float* p, const T* const* r, int m, int64_t n, float* y) {
  int64_t k = 0;
#ifdef __AVX2__
  if (g_simd >= 1 && m == 4) {
    const __m256 p0 = _mm256_set1_ps(p[0]), p1 = _mm256_set1_ps(p[1]), p2 = _mm256_set1_ps(p[2]), p3 = _mm256_set1_ps(p[3]);
    for (; k + 8 <= n; k += 8) {
      __m256 acc = _mm256_loadu_ps(y + k);
      acc = _mm256_fmadd_ps(p0, ld8(r[0] + k), acc);
      acc = _mm256_fmadd_ps(p1, ld8(r[1] + k), acc);
      acc = _mm256_fmadd_ps(p2, ld8(r[2] + k), acc);
      acc = _mm256_fmadd_ps(p3, ld8(r[3] + k), acc);
      _mm256_storeu_ps(y + k, acc);
    }
  }
#endif
  for (; k < n; ++k) {
    float acc = y[k];
    for (int j = 0; j < m; ++j) acc += p[j] * ld1(r[j] + k);
    y[k] = acc;
  }
}

struct Part {
  int64_t seq, start, stop;
};

// One part: running max m[H], sum l[H] and unnormalised output acc[H, R] over positions [start, stop).
template <typename T>
void attend_part(const float* q, const T* pool, const int32_t* table, int64_t bs, int64_t H, int64_t W, int64_t R,
                 float scale, const Part& part, float* m, float* l, float* acc) {
  float sc[kTile];
  const T* rows[kTile];
  for (int64_t h = 0; h < H; ++h) m[h] = -INFINITY, l[h] = 0.f;
  std::fill(acc, acc + H * R, 0.f);
  for (int64_t t0 = part.start; t0 < part.stop; t0 += kTile) {
    const int64_t nt = std::min(kTile, part.stop - t0);
    for (int64_t j = 0; j < nt; ++j) {
      const int64_t p = t0 + j;
      rows[j] = pool + (static_cast<int64_t>(table[p / bs]) * bs + p % bs) * W;
    }
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q + h * W;
      float tile_max = -INFINITY;
      for (int64_t j = 0; j < nt; j += 4) {
        const int mj = static_cast<int>(std::min<int64_t>(4, nt - j));
        dot_rows(qh, rows + j, mj, W, sc + j);
      }
      for (int64_t j = 0; j < nt; ++j) tile_max = std::max(tile_max, sc[j] *= scale);
      float* ah = acc + h * R;
      if (tile_max > m[h]) {
        const float f = std::exp(m[h] - tile_max);  // 0 on the first tile (m = -inf)
        if (l[h] > 0.f) {
          l[h] *= f;
          for (int64_t r = 0; r < R; ++r) ah[r] *= f;
        }
        m[h] = tile_max;
      }
      for (int64_t j = 0; j < nt; ++j) l[h] += (sc[j] = std::exp(sc[j] - m[h]));
      for (int64_t j = 0; j < nt; j += 4) {
        const int mj = static_cast<int>(std::min<int64_t>(4, nt - j));
        axpy_rows(sc + j, rows + j, mj, R, ah);
      }
    }
  }
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

torch::Tensor mla_paged_decode(torch::Tensor q, torch::Tensor pool, torch::Tensor tables, torch::Tensor lens,
                               int64_t block_size, int64_t rank, double scale) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == torch::kFloat32 && q.is_contiguous(), "q must be contiguous fp32 [n, H, W]");
  const int64_t n = q.size(0), H = q.size(1), W = q.size(2), R = rank;
  TORCH_CHECK(pool.dim() == 2 && pool.size(1) == W && pool.is_contiguous() &&
              (pool.scalar_type() == torch::kFloat32 || pool.scalar_type() == torch::kBFloat16),
              "pool must be contiguous fp32 or bf16 [rows, ", W, "]");
  TORCH_CHECK(tables.dim() == 2 && tables.size(0) == n && tables.scalar_type() == torch::kInt32 && tables.is_contiguous(),
              "tables must be contiguous int32 [n, max_blocks]");
  TORCH_CHECK(lens.dim() == 1 && lens.size(0) == n && lens.scalar_type() == torch::kInt32 && lens.is_contiguous(),
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
  auto out = torch::empty({n, H, R}, q.options());
  const float sc = static_cast<float>(scale);
  if (pool.scalar_type() == torch::kFloat32)
    paged_decode(q.data_ptr<float>(), pool.data_ptr<float>(), tp, maxb, parts, first_part, n, block_size, H, W, R, sc,
                 out.data_ptr<float>());
  else
    paged_decode(q.data_ptr<float>(), reinterpret_cast<const uint16_t*>(pool.data_ptr<at::BFloat16>()), tp, maxb, parts,
                 first_part, n, block_size, H, W, R, sc, out.data_ptr<float>());
  return out;
}
