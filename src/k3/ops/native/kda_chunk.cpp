// kda_chunk: chunked Kimi Delta Attention for prefill (the math of k3/ops/kda/chunk.py), one (sequence,
// head) per task. Within a chunk of C tokens with cumulative log-decay G_i = sum_{t<=i} g_t per key channel:
//   L[i, j] = beta_i sum_d k_id k_jd exp(G_id - G_jd)  (j < i);   A[i, j] = scale sum_d q_id k_jd exp(G_id - G_jd)  (j <= i)
//   (I + L) w = diag(beta) (exp(G) k),  (I + L) u = diag(beta) v     (forward substitution)
//   v' = u - w S;   o = (scale q exp(G)) S + A v';   S <- Diag(exp(G_last)) S + (exp(G_last - G) k)^T v'
// q, k, g [B, T, H, K], v [B, T, H, V], beta [B, T, H] fp32 contiguous; S0 [B, H, K, V] or empty (zeros).
// Returns o [B, T, H, V] and the final state [B, H, K, V].
//
// Every exponential is of a non-positive difference (G never increases: g <= 0), so nothing overflows; an
// argument below -87.3 gives 0, as fp32 would flush its result. The decayed products go in blocks of kSub
// rows, factored through each block's first row for the columns before it and pairwise inside it (see
// decayed_products). Each (sequence, head) is computed alone, so a sequence's result never depends on its
// batch.
#include "k3.h"

namespace k3 {

namespace {

inline v8f vexp_flush(v8f x) { return pick(x < -87.3f, splat(0.0f), vexp(x)); }

inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

inline float lanes_sum(v8f v) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }

// e[0:n] = exp(a - b) (b null: exp(a)), flushed below fp32's normal range.
inline void exp_diff(const float* a, const float* b, float* e, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(e + i, vexp_flush(b ? load8(a + i) - load8(b + i) : load8(a + i)));
  if (i < n) {
    v8f d = splat(0.0f);
    for (int64_t j = 0; j < n - i; ++j) d[j] = b ? a[i + j] - b[i + j] : a[i + j];
    d = vexp_flush(d);
    for (int64_t j = 0; j < n - i; ++j) e[i + j] = d[j];
  }
}

// out[0:width] = (accumulate ? out : 0) + sum_m coef[m] * rows[m * ld + 0:width], m < n: a row vector times
// a matrix, 32 columns at a time in registers (an axpy per row would load and store out n times).
inline void row_times(const float* coef, int64_t n, const float* rows, int64_t ld, float* out, int64_t width,
                      bool accumulate) {
  int64_t x = 0;
  for (; x + 32 <= width; x += 32) {
    v8f a0 = accumulate ? load8(out + x) : splat(0.0f), a1 = accumulate ? load8(out + x + 8) : splat(0.0f);
    v8f a2 = accumulate ? load8(out + x + 16) : splat(0.0f), a3 = accumulate ? load8(out + x + 24) : splat(0.0f);
    for (int64_t m = 0; m < n; ++m) {
      const float* r = rows + m * ld + x;
      const float cm = coef[m];
      a0 += cm * load8(r), a1 += cm * load8(r + 8), a2 += cm * load8(r + 16), a3 += cm * load8(r + 24);
    }
    store8(out + x, a0), store8(out + x + 8, a1), store8(out + x + 16, a2), store8(out + x + 24, a3);
  }
  for (; x < width; ++x) {
    float a = accumulate ? out[x] : 0.f;
    for (int64_t m = 0; m < n; ++m) a += coef[m] * rows[m * ld + x];
    out[x] = a;
  }
}

// (sum_d x1[d] y[d], sum_d x2[d] y[d])
inline void dot2(const float* x1, const float* x2, const float* y, int64_t n, float& s1, float& s2) {
  v8f a = splat(0.0f), b = splat(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const v8f yv = load8(y + i);
    a += load8(x1 + i) * yv;
    b += load8(x2 + i) * yv;
  }
  s1 = lanes_sum(a);
  s2 = lanes_sum(b);
  for (; i < n; ++i) s1 += x1[i] * y[i], s2 += x2[i] * y[i];
}

constexpr int64_t kSub = 16;   // rows per block of the decayed products

struct DecayBuffers {
  std::vector<float> kd, qd, kb, e;   // a block's rows decayed to its first row, the rows before it decayed from it
  DecayBuffers(int64_t C, int64_t K) : kd(kSub * K), qd(kSub * K), kb(C * K), e(K) {}
};

// L[i, j] = beta_i sum_d k_id k_jd exp(G_id - G_jd) (j < i, else 0) and A[i, j] = scale sum_d q_id k_jd
// exp(G_id - G_jd) (j <= i) for rows i < c ([C] row stride). Rows go in blocks of kSub from r: for columns
// j < r the decay factors through G_r, exp(G_i - G_r) exp(G_r - G_j), both at most 1 (G never increases),
// so the block is dot products of decayed rows; inside the block the exponentials are pairwise.
void decayed_products(const float* Q, const float* Kr, const float* G, const float* beta, int64_t beta_stride,
                      float scale, int64_t c, int64_t K, int64_t C, float* L, float* A, DecayBuffers& b) {
  for (int64_t r = 0; r < c; r += kSub) {
    const int64_t e_ = std::min(r + kSub, c);
    const float* Gr = G + r * K;
    for (int64_t i = r; i < e_; ++i) {
      exp_diff(G + i * K, Gr, b.e.data(), K);
      for (int64_t d = 0; d < K; ++d) {
        b.kd[(i - r) * K + d] = Kr[i * K + d] * b.e[d];
        b.qd[(i - r) * K + d] = Q[i * K + d] * b.e[d];
      }
    }
    for (int64_t j = 0; j < r; ++j) {
      exp_diff(Gr, G + j * K, b.e.data(), K);
      for (int64_t d = 0; d < K; ++d) b.kb[j * K + d] = Kr[j * K + d] * b.e[d];
    }
    for (int64_t i = r; i < e_; ++i) {
      const float bi = beta[i * beta_stride];
      for (int64_t j = 0; j < r; ++j) {
        float kk, qk;
        dot2(b.kd.data() + (i - r) * K, b.qd.data() + (i - r) * K, b.kb.data() + j * K, K, kk, qk);
        L[i * C + j] = bi * kk;
        A[i * C + j] = scale * qk;
      }
      for (int64_t j = r; j <= i; ++j) {   // the diagonal block: kj = k_j exp(G_i - G_j), pairwise
        exp_diff(G + i * K, G + j * K, b.e.data(), K);
        for (int64_t d = 0; d < K; ++d) b.e[d] *= Kr[j * K + d];
        float kk, qk;
        dot2(Kr + i * K, Q + i * K, b.e.data(), K, kk, qk);
        L[i * C + j] = j < i ? bi * kk : 0.f;
        A[i * C + j] = scale * qk;
      }
    }
  }
}

struct ChunkShape {
  int64_t T, H, K, V, C;
};

// One (sequence, head): its rows are at stride H * K (q, k, g) / H * V (v) / H (beta) from the given bases.
// S [K, V] in place.
void kda_chunk_head(const float* q, const float* k, const float* v, const float* g, const float* beta, float scale,
                    const ChunkShape& s, float* S, float* o) {
  const int64_t K = s.K, V = s.V, C = s.C, qs = s.H * K, vs = s.H * V;
  std::vector<float> G(C * K), EG(C * K), Q(C * K), Kr(C * K), L(C * C), A(C * C), W(C * K), U(C * V), e(K);
  std::vector<float> coef(std::max(C, K)), KK(K * C);   // EG: exp(G); KK [K][C]: exp(G_last - G_i) k_i, transposed
  DecayBuffers buf(C, K);
  for (int64_t t0 = 0; t0 < s.T; t0 += C) {
    const int64_t c = std::min(C, s.T - t0);
    for (int64_t i = 0; i < c; ++i) {
      const int64_t t = t0 + i;
      std::copy(q + t * qs, q + t * qs + K, Q.data() + i * K);
      std::copy(k + t * qs, k + t * qs + K, Kr.data() + i * K);
      for (int64_t d = 0; d < K; ++d) G[i * K + d] = (i ? G[(i - 1) * K + d] : 0.f) + g[t * qs + d];
      exp_diff(G.data() + i * K, nullptr, EG.data() + i * K, K);
    }
    decayed_products(Q.data(), Kr.data(), G.data(), beta + t0 * s.H, s.H, scale, c, K, C, L.data(), A.data(), buf);
    // w, u by forward substitution through I + L: row i is diag(beta) times its input, less L[i, :i] times
    // the rows before it.
    for (int64_t i = 0; i < c; ++i) {
      const float bi = beta[(t0 + i) * s.H];
      float* w = W.data() + i * K;
      float* u = U.data() + i * V;
      for (int64_t d = 0; d < K; ++d) w[d] = EG[i * K + d] * (bi * Kr[i * K + d]);
      for (int64_t x = 0; x < V; ++x) u[x] = bi * v[(t0 + i) * vs + x];
      for (int64_t j = 0; j < i; ++j) coef[j] = -L[i * C + j];
      row_times(coef.data(), i, W.data(), K, w, K, true);
      row_times(coef.data(), i, U.data(), V, u, V, true);
    }
    // o = (scale q exp(G)) S + A v', with v' = u - w S (into U) computed first, both from S before it moves.
    for (int64_t i = 0; i < c; ++i) {
      for (int64_t d = 0; d < K; ++d) coef[d] = -W[i * K + d];
      row_times(coef.data(), K, S, V, U.data() + i * V, V, true);
    }
    for (int64_t i = 0; i < c; ++i) {
      for (int64_t d = 0; d < K; ++d) coef[d] = scale * Q[i * K + d] * EG[i * K + d];
      float* out = o + (t0 + i) * vs;
      row_times(coef.data(), K, S, V, out, V, false);
      row_times(A.data() + i * C, i + 1, U.data(), V, out, V, true);
    }
    // S <- Diag(exp(G_last)) S + (exp(G_last - G) k)^T v': row d of S takes sum_i kk[i, d] v'_i.
    const float* last = G.data() + (c - 1) * K;
    for (int64_t i = 0; i < c; ++i) {
      exp_diff(last, G.data() + i * K, e.data(), K);                 // exp(G_last - G_i)
      for (int64_t d = 0; d < K; ++d) KK[d * C + i] = e[d] * Kr[i * K + d];
    }
    const float* exp_last = EG.data() + (c - 1) * K;
    for (int64_t d = 0; d < K; ++d) {
      for (int64_t x = 0; x < V; ++x) S[d * V + x] *= exp_last[d];
      row_times(KK.data() + d * C, c, U.data(), V, S + d * V, V, true);
    }
  }
}

}  // namespace

std::vector<at::Tensor> kda_chunk(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor g,
                                     at::Tensor beta, double scale, at::Tensor initial_state, int64_t chunk) {
  TORCH_CHECK(q.dim() == 4 && q.sizes() == k.sizes() && q.sizes() == g.sizes(), "q, k, g must be [B, T, H, K] alike");
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  TORCH_CHECK(v.dim() == 4 && v.size(0) == B && v.size(1) == T && v.size(2) == H, "v must be [B, T, H, V]");
  TORCH_CHECK(beta.dim() == 3 && beta.size(0) == B && beta.size(1) == T && beta.size(2) == H, "beta must be [B, T, H]");
  TORCH_CHECK(chunk >= 1, "chunk must be positive");
  for (const auto* t : {&q, &k, &v, &g, &beta})
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous(), "KDA chunk inputs must be contiguous fp32");
  auto S = initial_state.numel() == 0 ? at::zeros({B, H, K, V}, q.options()) : initial_state.contiguous().clone();
  TORCH_CHECK(S.scalar_type() == at::kFloat && S.dim() == 4 && S.size(0) == B && S.size(1) == H && S.size(2) == K &&
              S.size(3) == V, "initial state must be fp32 [B, H, K, V]");
  auto o = at::empty({B, T, H, V}, q.options());
  const ChunkShape shape{T, H, K, V, chunk};
  const float sc = static_cast<float>(scale);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    const int64_t row = b * T * H + h;   // (b, t = 0, h)
    kda_chunk_head(q.data_ptr<float>() + row * K, k.data_ptr<float>() + row * K, v.data_ptr<float>() + row * V,
                   g.data_ptr<float>() + row * K, beta.data_ptr<float>() + row, sc, shape,
                   S.data_ptr<float>() + bh * K * V, o.data_ptr<float>() + row * V);
  }
  return {o, S};
}

}  // namespace k3
