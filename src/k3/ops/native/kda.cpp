// kda_decode_slots: one token of Kimi Delta Attention for n sequences, everything after the projections and
// before the output gate, in one call, on the state pools themselves (the layer's reference is
// short_conv_silu + l2_norm + recurrent_kda over gathered state, then scattered back):
//   q, k, v <- silu(short conv over [tail, x]);  tails <- last K_conv - 1 inputs
//   q, k    <- per head x / sqrt(sum x^2 + 1e-6)
//   S <- Diag(exp(g)) S;  u = beta (v - S^T k);  S <- S + k u^T;  o = S^T (scale q)
// Shapes: q, k, v [n, P] (P = H*D), conv weights [P, Kc], tail pools [slots, Kc-1, P], g [n, H, D] log-decay,
// beta [n, H], state pool [slots, H, D, V], index [n] int64 (sequence i lives in slot index[i], all distinct).
// Returns o [n, H, V]; the slots named by index are updated in place, nothing else is written.
// kda_window_slots: the same for verify windows of T positions a sequence ([n, T, ...]).
//
// kda_gates_rows: the decay gate and beta of decode rows from their raw projections, in one call:
//   g[n, h, d] = lb * sigmoid(exp(A_log[h]) * (raw[n, h, d] + dt_bias[h, d]))   (bounded, K3)
//              = -exp(A_log[h]) * softplus(raw[n, h, d] + dt_bias[h, d])          (unbounded, Kimi-Linear)
//   beta[n, h] = sigmoid(b[n, h]);   raw fp32 [n, H*D], b fp32 [n, H], A_log [H], dt_bias [H*D].
#include "k3.h"
#include <ATen/ops/empty_like.h>

namespace k3 {

namespace {

// y = silu(conv over [tail, x]); then the tail shifts left by one and takes x (in place, per channel).
// The SIMD levels run the channels in passes over all P, one tap at a time (each channel's sum in the
// same order as the scalar level's channel-at-a-time loop, so the same bits): every pass is a vector
// loop, and the taps' stride Kc is a constant for K3's 4, which lets the compiler take w's columns with
// shuffles.
template <int Kc>
void conv_silu_passes(const float* x, const float* w, float* tail, float* y, int64_t P) {
  for (int64_t c = 0; c < P; ++c) y[c] = tail[c] * w[c * Kc];
  for (int j = 1; j < Kc - 1; ++j)
    for (int64_t c = 0; c < P; ++c) y[c] += tail[j * P + c] * w[c * Kc + j];
  for (int64_t c = 0; c < P; ++c) y[c] += x[c] * w[c * Kc + Kc - 1];
  for (int j = 0; j + 1 < Kc - 1; ++j) std::copy(tail + (j + 1) * P, tail + (j + 2) * P, tail + j * P);
  std::copy(x, x + P, tail + (Kc - 2) * P);
}

void conv_silu_step(const float* x, const float* w, float* tail, float* y, int64_t P, int64_t Kc) {
  if (Kc == 4 && g_simd >= 1) {
    conv_silu_passes<4>(x, w, tail, y, P);
  } else {
    for (int64_t c = 0; c < P; ++c) {
      float acc = tail[c] * w[c * Kc];
      for (int64_t j = 1; j < Kc - 1; ++j) acc += tail[j * P + c] * w[c * Kc + j];
      acc += x[c] * w[c * Kc + Kc - 1];
      y[c] = acc;
      for (int64_t j = 0; j + 1 < Kc - 1; ++j) tail[j * P + c] = tail[(j + 1) * P + c];
      tail[(Kc - 2) * P + c] = x[c];
    }
  }
  map8(y, y, P, [](v8f v) { return v * vsigmoid(v); });
}

void l2_normalise(float* x, int64_t D) {
  float ss = 0.f;
  for (int64_t i = 0; i < D; ++i) ss += x[i] * x[i];
  const float r = 1.0f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < D; ++i) x[i] *= r;
}

// One head in place: S [K, V] decays, takes the delta-rule update, and is read out into o [V]. decay [K]
// is exp(g). Every element's operations run in this order in every form (a multiply, then an add).
void delta_rule_step(const float* q, const float* k, const float* v, const float* decay, float beta, float* S,
                     float* o, int64_t K, int64_t V, float scale) {
  std::vector<float> pred(V, 0.f);
  for (int64_t i = 0; i < K; ++i) {
    const float d = decay[i], ki = k[i];
    float* s = S + i * V;
    for (int64_t j = 0; j < V; ++j) {
      s[j] *= d;
      pred[j] += ki * s[j];
    }
  }
  for (int64_t j = 0; j < V; ++j) pred[j] = beta * (v[j] - pred[j]);  // now u
  for (int64_t j = 0; j < V; ++j) o[j] = 0.f;
  for (int64_t i = 0; i < K; ++i) {
    const float ki = k[i], qi = q[i] * scale;
    float* s = S + i * V;
    for (int64_t j = 0; j < V; ++j) {
      s[j] += ki * pred[j];
      o[j] += qi * s[j];
    }
  }
}

// delta_rule_step on columns [c0, c0 + 16 NV) of S with AVX-512, the same bits: a column's sums involve
// only that column, so its prediction, u and output stay in registers through both passes over the rows
// (the generic loop keeps them in memory and takes 8 lanes). `next` (or nullptr): the next head's state,
// whose same columns are prefetched row by row during the first pass, while this head's rows are
// computed.
template <int NV>
K3_AVX512 void delta_rule_columns_avx512(const float* q, const float* k, const float* v, const float* decay,
                                         float beta, float* S, float* o, int64_t K, int64_t V, float scale,
                                         const float* next, int64_t c0) {
  __m512 acc[NV], u[NV];
  for (int c = 0; c < NV; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < K; ++i) {
    const __m512 d = _mm512_set1_ps(decay[i]), ki = _mm512_set1_ps(k[i]);
    float* s = S + i * V + c0;
    if (next != nullptr)
      for (int c = 0; c < NV; ++c) _mm_prefetch(reinterpret_cast<const char*>(next + i * V + c0 + 16 * c), _MM_HINT_T0);
    for (int c = 0; c < NV; ++c) {
      const __m512 sv = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * c), d);
      _mm512_storeu_ps(s + 16 * c, sv);
      acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(ki, sv));
    }
  }
  const __m512 b = _mm512_set1_ps(beta);
  for (int c = 0; c < NV; ++c) {
    u[c] = _mm512_mul_ps(b, _mm512_sub_ps(_mm512_loadu_ps(v + c0 + 16 * c), acc[c]));
    acc[c] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < K; ++i) {
    const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i] * scale);
    float* s = S + i * V + c0;
    for (int c = 0; c < NV; ++c) {
      const __m512 sv = _mm512_add_ps(_mm512_loadu_ps(s + 16 * c), _mm512_mul_ps(ki, u[c]));
      _mm512_storeu_ps(s + 16 * c, sv);
      acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(qi, sv));
    }
  }
  for (int c = 0; c < NV; ++c) _mm512_storeu_ps(o + c0 + 16 * c, acc[c]);
}

// One head: the AVX-512 form in column blocks of 128 and then 16 when V is a multiple of 16, else the
// generic loop.
void delta_rule_head(const float* q, const float* k, const float* v, const float* g, float beta, float* S, float* o,
                     int64_t K, int64_t V, float scale, const float* next) {
  std::vector<float> decay(K);
  map8(g, decay.data(), K, [](v8f x) { return vexp(x); });
  if (g_simd < 2 || V % 16 != 0) return delta_rule_step(q, k, v, decay.data(), beta, S, o, K, V, scale);
  int64_t c0 = 0;
  for (; c0 + 128 <= V; c0 += 128) delta_rule_columns_avx512<8>(q, k, v, decay.data(), beta, S, o, K, V, scale, next, c0);
  for (; c0 < V; c0 += 16) delta_rule_columns_avx512<1>(q, k, v, decay.data(), beta, S, o, K, V, scale, next, c0);
}

void check_f32(const at::Tensor& t, std::initializer_list<int64_t> shape, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous() && t.sizes().equals(shape),
              name, " must be contiguous fp32 of shape ", c10::IntArrayRef(shape), ", got ", t.sizes());
}

void check_pool(const at::Tensor& t, int64_t rows, int64_t cols, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous() && t.dim() == 3 && t.size(1) == rows &&
              t.size(2) == cols, name, " must be a contiguous fp32 pool [slots, ", rows, ", ", cols, "], got ", t.sizes());
}

// n sequences of T positions each (T = 1: decode) on their slots in place: the conv tails step position
// by position, then each (sequence, head) runs its T delta-rule steps back to back, so its state [K, V]
// is read from memory once for the window and stays in cache between positions. Every position runs the
// same code as a one-token call, so a window equals T one-token calls bit for bit.
at::Tensor kda_slots(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor wq, at::Tensor wk, at::Tensor wv,
                     at::Tensor tq, at::Tensor tk, at::Tensor tv, at::Tensor S, at::Tensor index, at::Tensor g,
                     at::Tensor beta, double scale, int64_t T) {
  TORCH_CHECK(S.dim() == 4 && S.scalar_type() == at::kFloat && S.is_contiguous(), "state pool must be contiguous fp32 [slots, H, K, V]");
  TORCH_CHECK(index.dim() == 1 && index.scalar_type() == at::kLong && index.is_contiguous(), "index must be int64 [n]");
  const int64_t slots = S.size(0), H = S.size(1), K = S.size(2), V = S.size(3), P = H * K, Kc = wq.size(1);
  const int64_t n = index.size(0), rows = n * T;
  TORCH_CHECK(Kc >= 2, "short conv kernel must have at least 2 taps");
  for (const auto* t : {&q, &k}) check_f32(*t, {rows, P}, "q/k");
  check_f32(v, {rows, H * V}, "v");
  for (const auto* t : {&wq, &wk}) check_f32(*t, {P, Kc}, "q/k conv weight");
  check_f32(wv, {H * V, Kc}, "v conv weight");
  for (const auto* t : {&tq, &tk}) check_pool(*t, Kc - 1, P, "q/k conv tail");
  check_pool(tv, Kc - 1, H * V, "v conv tail");
  TORCH_CHECK(tq.size(0) == slots && tk.size(0) == slots && tv.size(0) == slots, "tail pools must have one row per slot");
  check_f32(g, {rows, H, K}, "g");
  check_f32(beta, {rows, H}, "beta");
  const int64_t* ix = index.data_ptr<int64_t>();
  std::vector<int64_t> seen(ix, ix + n);
  std::sort(seen.begin(), seen.end());
  TORCH_CHECK(n == 0 || (seen.front() >= 0 && seen.back() < slots), "index names a slot outside the pool");
  TORCH_CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end(), "index names a slot twice");
  auto cq = at::empty_like(q), ck = at::empty_like(k), cv = at::empty_like(v);
  auto o = at::empty({rows, H, V}, S.options());
  const float sc = static_cast<float>(scale);
  for (int64_t r = 0; r < rows; ++r) {   // row r = position r % T of sequence r / T, in order
    const int64_t s = ix[r / T];
    conv_silu_step(q.data_ptr<float>() + r * P, wq.data_ptr<float>(), tq.data_ptr<float>() + s * (Kc - 1) * P,
                   cq.data_ptr<float>() + r * P, P, Kc);
    conv_silu_step(k.data_ptr<float>() + r * P, wk.data_ptr<float>(), tk.data_ptr<float>() + s * (Kc - 1) * P,
                   ck.data_ptr<float>() + r * P, P, Kc);
    conv_silu_step(v.data_ptr<float>() + r * H * V, wv.data_ptr<float>(), tv.data_ptr<float>() + s * (Kc - 1) * H * V,
                   cv.data_ptr<float>() + r * H * V, H * V, Kc);
  }
  float* pool = S.data_ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < n * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    float* state = pool + (ix[b] * H + h) * K * V;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t rh = (b * T + t) * H + h;   // this position's head
      float* qh = cq.data_ptr<float>() + rh * K;
      float* kh = ck.data_ptr<float>() + rh * K;
      l2_normalise(qh, K);
      l2_normalise(kh, K);
      // the last position prefetches this thread's next head, mostly; earlier ones reuse this state
      const float* next = t + 1 == T && h + 1 < H ? pool + (ix[b] * H + h + 1) * K * V : nullptr;
      delta_rule_head(qh, kh, cv.data_ptr<float>() + rh * V, g.data_ptr<float>() + rh * K, beta.data_ptr<float>()[rh],
                      state, o.data_ptr<float>() + rh * V, K, V, sc, next);
    }
  }
  return o;
}

}  // namespace

at::Tensor kda_decode_slots(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor wq, at::Tensor wk,
                               at::Tensor wv, at::Tensor tq, at::Tensor tk, at::Tensor tv, at::Tensor S,
                               at::Tensor index, at::Tensor g, at::Tensor beta, double scale) {
  return kda_slots(q, k, v, wq, wk, wv, tq, tk, tv, S, index, g, beta, scale, 1);
}

// kda_decode_slots for verify windows: q, k [n, T, P], v [n, T, H*V], g [n, T, H, K], beta [n, T, H]
// -> o [n, T, H, V]; equal bit for bit to T calls of kda_decode_slots, position by position.
at::Tensor kda_window_slots(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor wq, at::Tensor wk,
                               at::Tensor wv, at::Tensor tq, at::Tensor tk, at::Tensor tv, at::Tensor S,
                               at::Tensor index, at::Tensor g, at::Tensor beta, double scale) {
  TORCH_CHECK(q.dim() == 3 && q.size(1) >= 1, "q must be [n, T, P] with T >= 1, got ", q.sizes());
  const int64_t n = q.size(0), T = q.size(1);
  for (const auto* t : {&k, &v, &g, &beta})   // the rest of the shapes are kda_slots' checks, on the flat rows
    TORCH_CHECK(t->dim() == (t == &g ? 4 : 3) && t->size(0) == n && t->size(1) == T,
                "k, v [n, T, P], g [n, T, H, K] and beta [n, T, H] must share q's n = ", n, " and T = ", T,
                ", got ", t->sizes());
  auto flat = [&](const at::Tensor& t) { return t.reshape({n * T, t.size(-1)}); };
  auto o = kda_slots(flat(q), flat(k), flat(v), wq, wk, wv, tq, tk, tv, S, index, g.reshape({n * T, g.size(2), g.size(3)}),
                     beta.reshape({n * T, beta.size(2)}), scale, T);
  return o.view({n, T, o.size(1), o.size(2)});
}

std::vector<at::Tensor> kda_gates_rows(at::Tensor raw, at::Tensor b, at::Tensor a_log, at::Tensor dt_bias,
                                          bool bounded, double lower_bound) {
  const int64_t n = raw.size(0), H = a_log.size(0), P = dt_bias.size(0);
  TORCH_CHECK(H > 0 && P % H == 0, "dt_bias must hold head_dim entries per head");
  check_f32(raw, {n, P}, "raw gate");
  check_f32(b, {n, H}, "b");
  check_f32(a_log, {H}, "A_log");
  check_f32(dt_bias, {P}, "dt_bias");
  const int64_t D = P / H;
  auto g = at::empty({n, H, D}, raw.options());
  auto beta = at::empty({n, H}, raw.options());
  const float *rp = raw.data_ptr<float>(), *bp = b.data_ptr<float>(), *ap = a_log.data_ptr<float>(),
              *dp = dt_bias.data_ptr<float>();
  float *gp = g.data_ptr<float>(), *betap = beta.data_ptr<float>();
  const float lb = static_cast<float>(lower_bound);
  map8(bp, betap, n * H, [](v8f v) { return vsigmoid(v); });
  for (int64_t r = 0; r < n; ++r)
    for (int64_t h = 0; h < H; ++h) {
      const float a = std::exp(ap[h]);
      float* out = gp + r * P + h * D;
      for (int64_t d = 0; d < D; ++d) out[d] = rp[r * P + h * D + d] + dp[h * D + d];
      if (bounded)
        map8(out, out, D, [=](v8f z) { return lb * vsigmoid(a * z); });
      else
        map8(out, out, D, [=](v8f z) { return -a * vsoftplus(z); });
    }
  return {g, beta};
}

// short_conv_silu: KDA's causal depthwise convolution with SiLU over many tokens (prefill), x fp32 [B, T, C],
// w fp32 [C, Kc] (tap Kc - 1 multiplies the current token), state fp32 [B, Kc - 1, C] or empty (zeros).
// y[b, t] = silu(sum_j [state, x][b, t + j] w[:, j]), taps added in order from 0 and SiLU as
// conv_silu_step computes them, so a token's result is the decode step's bits. Returns (y, the new state:
// the last Kc - 1 rows of [state, x]). Rows over threads; each computed alone.
std::vector<at::Tensor> short_conv_silu(at::Tensor x, at::Tensor w, at::Tensor state) {
  TORCH_CHECK(x.dim() == 3 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x must be contiguous fp32 [B, T, C]");
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  TORCH_CHECK(w.dim() == 2 && w.size(0) == C && w.size(1) >= 2 && w.scalar_type() == at::kFloat,
              "conv weight must be fp32 [C, Kc] with Kc >= 2");
  const int64_t Kc = w.size(1), P = Kc - 1;
  const bool zero_state = state.numel() == 0;
  TORCH_CHECK(zero_state || (state.dim() == 3 && state.size(0) == B && state.size(1) == P && state.size(2) == C &&
                             state.scalar_type() == at::kFloat && state.is_contiguous()),
              "conv state must be contiguous fp32 [B, Kc - 1, C]");
  // [Kc][C]: each tap's weights across channels, so the loops below run along channels. The copy is a
  // strided pass over the whole weight: for a few tokens it costs more than it saves, and they read the
  // weight as stored, each channel's taps summed in the same order (so the same bits either way).
  const auto wc = w.contiguous();
  const float* w0 = wc.data_ptr<float>();
  const bool transposed = B * T >= 8;
  std::vector<float> wt(transposed ? Kc * C : 0);
  for (int64_t c = 0; transposed && c < C; ++c)
    for (int64_t j = 0; j < Kc; ++j) wt[j * C + c] = w0[c * Kc + j];
  const std::vector<float> zeros(zero_state ? C : 0, 0.f);
  const float* xp = x.data_ptr<float>();
  const float* sp = zero_state ? nullptr : state.data_ptr<float>();
  // row r of [state, x] for sequence b (r < P: the state)
  auto row = [&](int64_t b, int64_t r) -> const float* {
    if (r >= P) return xp + (b * T + r - P) * C;
    return zero_state ? zeros.data() : sp + (b * P + r) * C;
  };
  auto y = at::empty({B, T, C}, x.options());
  float* yp = y.data_ptr<float>();
#pragma omp parallel for schedule(static) if (B * T > 16)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    float* out = yp + bt * C;
    const float* r0 = row(b, t);
    if (transposed) {
      for (int64_t c = 0; c < C; ++c) out[c] = r0[c] * wt[c];
      for (int64_t j = 1; j < Kc; ++j) {
        const float* rj = row(b, t + j);
        const float* wj = wt.data() + j * C;
        for (int64_t c = 0; c < C; ++c) out[c] += rj[c] * wj[c];
      }
    } else {
      for (int64_t c = 0; c < C; ++c) {
        float s = r0[c] * w0[c * Kc];
        for (int64_t j = 1; j < Kc; ++j) s += row(b, t + j)[c] * w0[c * Kc + j];
        out[c] = s;
      }
    }
    map8(out, out, C, [](v8f v) { return v * vsigmoid(v); });
  }
  auto next = at::empty({B, P, C}, x.options());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < P; ++r) std::copy(row(b, T + r), row(b, T + r) + C, next.data_ptr<float>() + (b * P + r) * C);
  return {y, next};
}

}  // namespace k3
