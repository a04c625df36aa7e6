// kda_decode: one token of Kimi Delta Attention for B sequences, everything after the projections and
// before the output gate, in one call (the layer's reference is short_conv_silu + l2_norm +
// recurrent_kda):
//   q, k, v <- silu(short conv over [tail, x]);  tails <- last K_conv - 1 inputs
//   q, k    <- per head x / sqrt(sum x^2 + 1e-6)
//   S <- Diag(exp(g)) S;  u = beta (v - S^T k);  S <- S + k u^T;  o = S^T (scale q)
// Shapes: q, k, v [B, P] (P = H*D), conv weights [P, Kc], tails [B, Kc-1, P], g [B, H, D] log-decay,
// beta [B, H], S [B, H, D, V]; returns (o [B, H, V], S', tails q, k, v). Inputs are never written.

namespace {

void conv_silu_step(const float* x, const float* w, const float* tail, float* y, float* new_tail, int64_t P, int64_t Kc) {
  for (int64_t c = 0; c < P; ++c) {
    float acc = tail[c] * w[c * Kc];
    for (int64_t j = 1; j < Kc - 1; ++j) acc += tail[j * P + c] * w[c * Kc + j];
    acc += x[c] * w[c * Kc + Kc - 1];
    y[c] = acc / (1.0f + std::exp(-acc));
    for (int64_t j = 0; j + 1 < Kc - 1; ++j) new_tail[j * P + c] = tail[(j + 1) * P + c];
    new_tail[(Kc - 2) * P + c] = x[c];
  }
}

void l2_normalise(float* x, int64_t D) {
  float ss = 0.f;
  for (int64_t i = 0; i < D; ++i) ss += x[i] * x[i];
  const float r = 1.0f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < D; ++i) x[i] *= r;
}

void delta_rule_step(const float* q, const float* k, const float* v, const float* g, float beta, const float* S,
                     float* Sn, float* o, int64_t K, int64_t V, float scale) {
  std::vector<float> pred(V, 0.f);
  for (int64_t i = 0; i < K; ++i) {
    const float d = std::exp(g[i]), ki = k[i];
    const float* s = S + i * V;
    float* sn = Sn + i * V;
    for (int64_t j = 0; j < V; ++j) {
      sn[j] = s[j] * d;
      pred[j] += ki * sn[j];
    }
  }
  for (int64_t j = 0; j < V; ++j) pred[j] = beta * (v[j] - pred[j]);  // now u
  for (int64_t j = 0; j < V; ++j) o[j] = 0.f;
  for (int64_t i = 0; i < K; ++i) {
    const float ki = k[i], qi = q[i] * scale;
    float* sn = Sn + i * V;
    for (int64_t j = 0; j < V; ++j) {
      sn[j] += ki * pred[j];
      o[j] += qi * sn[j];
    }
  }
}

void check_f32(const torch::Tensor& t, std::initializer_list<int64_t> shape, const char* name) {
  TORCH_CHECK(t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.sizes().equals(shape),
              name, " must be contiguous fp32 of shape ", c10::IntArrayRef(shape), ", got ", t.sizes());
}

}  // namespace

std::vector<torch::Tensor> kda_decode(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor wq,
                                      torch::Tensor wk, torch::Tensor wv, torch::Tensor tq, torch::Tensor tk,
                                      torch::Tensor tv, torch::Tensor g, torch::Tensor beta, torch::Tensor S,
                                      double scale) {
  const int64_t B = S.size(0), H = S.size(1), K = S.size(2), V = S.size(3), P = H * K, Kc = wq.size(1);
  TORCH_CHECK(Kc >= 2, "short conv kernel must have at least 2 taps");
  check_f32(S, {B, H, K, V}, "state");
  for (const auto* t : {&q, &k}) check_f32(*t, {B, P}, "q/k");
  check_f32(v, {B, H * V}, "v");
  for (const auto* t : {&wq, &wk}) check_f32(*t, {P, Kc}, "q/k conv weight");
  check_f32(wv, {H * V, Kc}, "v conv weight");
  for (const auto* t : {&tq, &tk}) check_f32(*t, {B, Kc - 1, P}, "q/k conv tail");
  check_f32(tv, {B, Kc - 1, H * V}, "v conv tail");
  check_f32(g, {B, H, K}, "g");
  check_f32(beta, {B, H}, "beta");
  auto cq = torch::empty_like(q), ck = torch::empty_like(k), cv = torch::empty_like(v);
  auto nq = torch::empty_like(tq), nk = torch::empty_like(tk), nv = torch::empty_like(tv);
  auto Sn = torch::empty_like(S);
  auto o = torch::empty({B, H, V}, S.options());
  const float sc = static_cast<float>(scale);
  for (int64_t b = 0; b < B; ++b) {
    conv_silu_step(q.data_ptr<float>() + b * P, wq.data_ptr<float>(), tq.data_ptr<float>() + b * (Kc - 1) * P,
                   cq.data_ptr<float>() + b * P, nq.data_ptr<float>() + b * (Kc - 1) * P, P, Kc);
    conv_silu_step(k.data_ptr<float>() + b * P, wk.data_ptr<float>(), tk.data_ptr<float>() + b * (Kc - 1) * P,
                   ck.data_ptr<float>() + b * P, nk.data_ptr<float>() + b * (Kc - 1) * P, P, Kc);
    conv_silu_step(v.data_ptr<float>() + b * H * V, wv.data_ptr<float>(), tv.data_ptr<float>() + b * (Kc - 1) * H * V,
                   cv.data_ptr<float>() + b * H * V, nv.data_ptr<float>() + b * (Kc - 1) * H * V, H * V, Kc);
  }
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    float* qh = cq.data_ptr<float>() + bh * K;
    float* kh = ck.data_ptr<float>() + bh * K;
    l2_normalise(qh, K);
    l2_normalise(kh, K);
    delta_rule_step(qh, kh, cv.data_ptr<float>() + bh * V, g.data_ptr<float>() + bh * K, beta.data_ptr<float>()[bh],
                    S.data_ptr<float>() + bh * K * V, Sn.data_ptr<float>() + bh * K * V, o.data_ptr<float>() + bh * V,
                    K, V, sc);
  }
  return {o, Sn, nq, nk, nv};
}
