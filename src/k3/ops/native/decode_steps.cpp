// The sublayers' decode steps, each one native call on decode rows x [N, hidden] fp32, for the decode plan
// (decode_plan.cpp, model/plan.py). Each calls the kernels the layer's Python forward picks through the
// registry, in its order and on the same tensors, so the bits are the same; what it saves is the
// interpreter between them (about a dozen calls, splits and views a sublayer).
//
// Weights arrive as typed structs, built once when the plan binds (model/plan_binding.py) and kept until
// the weights change; a step's state (KDA's slots, MLA's paged cache) as a struct built per step. Python
// sees them as classes with named fields (bindings.cpp). Matrices are (weight, scale): bf16 with an empty
// scale, or int8 codes with their bf16 scales.

namespace {

using Tensors = std::vector<torch::Tensor>;
using Ints = std::vector<int64_t>;

}  // namespace

struct Matrix {
  torch::Tensor weight, scale;   // scale: empty for bf16
};

// An RMSNorm's weight and epsilon.
struct NormWeights {
  torch::Tensor weight;
  double eps;
};

// Block AttnRes's mix (pseudo-query norm ⊙ proj, its epsilon) and the RMSNorm it feeds.
struct MixNormWeights {
  torch::Tensor norm, proj;
  double eps;
  NormWeights then;
};

// KimiDeltaAttention: the input group [q, k, v, gate, f_a, b] (`sizes` its widths), f_b_proj, o_proj; the
// gate parameters; q/k/v conv taps [P, Kc]; the output norm; the query scale.
struct KdaWeights {
  Matrix inputs;
  Ints sizes;
  Matrix f_b, o_proj;
  torch::Tensor a_log, dt_bias;
  bool bounded;
  double lower_bound;
  Tensors conv;
  torch::Tensor o_norm;
  double eps, scale;
};

// A KDA decode step's state: the recurrent pool [slots, H, K, V], the q/k/v conv tail pools, and each
// sequence's slot [N] (int64).
struct KdaState {
  torch::Tensor recurrent;
  Tensors tails;
  torch::Tensor index;
};

// Gated MLA: the input group (q_a, kv_a, gate), q_b_proj, o_proj; the two low-rank norms; kv_b_proj's
// halves w_uk [H, Dn, R] and w_uv [H, v, R] (bf16); the softmax scale.
struct MlaWeights {
  Matrix inputs;
  Ints sizes;
  Matrix q_b, o_proj;
  NormWeights q_a_norm, kv_a_norm;
  torch::Tensor w_uk, w_uv;
  double scale;
};

// An MLA decode step's cache: the paged pool, block tables and lengths (counting the new token) as
// mla_paged_decode reads them, and the pool row each sequence's new latents go to [N] (int64).
struct MlaState {
  torch::Tensor pool, tables, lens;
  int64_t block_size;
  torch::Tensor new_rows;
};

// An activation as the kernels take it: code (0 SiTU, 1 SiLU), beta, linear beta (0: none).
struct Activation {
  int64_t code;
  double beta, linear_beta;
};

// LatentMoE: the router and its bias; the input group (latent down, shared gate, shared up), the latent
// up projection, the shared expert's down; the experts' w1/w3/w2 codes and scales; the routed norm.
struct MoeWeights {
  Matrix router;
  torch::Tensor bias;
  int64_t top_k;
  bool renormalise;
  double scaling;
  Matrix inputs;
  Ints sizes;
  Matrix up, shared_down;
  Tensors bank;
  Activation act;
  NormWeights norm;
};

// The dense GLU MLP: the fused gate/up group and down_proj.
struct MlpWeights {
  Matrix inputs;
  Ints sizes;
  Matrix down;
  Activation act;
};

using AttentionWeights = std::variant<KdaWeights, MlaWeights>;
using AttentionState = std::variant<KdaState, MlaState>;
using FfnWeights = std::variant<MoeWeights, MlpWeights>;

namespace {

torch::Tensor gemv(const torch::Tensor& x, const Matrix& m) {
  PartTimer timer(kGemv);
  return m.scale.numel() == 0 ? bf16_linear(x, m.weight) : int8_linear(x, m.weight, m.scale);
}

// A fused group's product split into its members' outputs, each contiguous ([N, out_i]).
Tensors split_outputs(const torch::Tensor& y, const Ints& sizes) {
  Tensors parts;
  for (const auto& p : y.split_with_sizes(sizes, 1)) parts.push_back(p.contiguous());
  return parts;
}

torch::Tensor kda_step(const torch::Tensor& x, const KdaWeights& w, const KdaState& s) {
  TORCH_CHECK(w.sizes.size() == 6 && w.conv.size() == 3 && s.tails.size() == 3,
              "KDA step: 6 input widths, 3 convs, 3 tails");
  TORCH_CHECK(s.recurrent.dim() == 4, "KDA step: the state pool must be [slots, H, K, V]");
  const int64_t N = x.size(0), H = s.recurrent.size(1), D = s.recurrent.size(3);
  auto in = split_outputs(gemv(x, w.inputs), w.sizes);
  const auto f = gemv(in[4], w.f_b);
  auto gates = timed(kRowOps, [&] { return kda_gates_rows(f, in[5], w.a_log, w.dt_bias, w.bounded, w.lower_bound); });
  auto o = timed(kKdaRecurrence, [&] {
    return kda_decode_slots(in[0], in[1], in[2], w.conv[0], w.conv[1], w.conv[2], s.tails[0], s.tails[1], s.tails[2],
                            s.recurrent, s.index, gates[0], gates[1], w.scale);
  });
  o = timed(kRowOps, [&] { return gated_rms_norm_rows(o.view({N * H, D}), in[3].view({N * H, D}), w.o_norm, w.eps); });
  return gemv(o.view({N, H * D}), w.o_proj);
}

// torch.sigmoid as k3.ops.elementwise.sigmoid calls it: on the flattened input padded to a multiple of 64
// elements, so every element takes ATen's vector form whatever the row count.
torch::Tensor sigmoid_invariant(const torch::Tensor& x) {
  const int64_t n = x.numel(), pad = (64 - n % 64) % 64;
  if (pad == 0) return torch::sigmoid(x);
  return torch::sigmoid(torch::constant_pad_nd(x.reshape({-1}), {0, pad})).narrow(0, 0, n).view(x.sizes());
}

// Gated MLA's step on its paged cache: the projections, this step's latents written to the pool rows
// new_rows (in the pool's dtype, as the cache views write them), absorbed attention over the paged
// latents, W_UV, the sigmoid output gate and o_proj.
torch::Tensor mla_step(const torch::Tensor& x, const MlaWeights& w, const MlaState& s) {
  TORCH_CHECK(w.w_uk.dim() == 3 && w.w_uv.dim() == 3, "MLA step: w_uk [H, Dn, R] and w_uv [H, v, R]");
  const int64_t N = x.size(0), H = w.w_uk.size(0), Dn = w.w_uk.size(1), R = w.w_uk.size(2);
  TORCH_CHECK(w.sizes.size() == 3 && R < w.sizes[1], "MLA step: 3 input widths (q_a, kv_a, gate), rank below kv_a's");
  TORCH_CHECK(s.new_rows.dim() == 1 && s.new_rows.size(0) == N && s.new_rows.scalar_type() == torch::kLong,
              "MLA step: one new pool row (int64) per sequence");
  auto in = split_outputs(gemv(x, w.inputs), w.sizes);
  const auto q = gemv(rms_norm_rows(in[0], w.q_a_norm.weight, w.q_a_norm.eps), w.q_b).view({N, H, -1});
  const auto c_kv = rms_norm_rows(in[1].narrow(1, 0, R).contiguous(), w.kv_a_norm.weight, w.kv_a_norm.eps);
  const auto k_x = in[1].narrow(1, R, in[1].size(1) - R);
  s.pool.index_copy_(0, s.new_rows, torch::cat({c_kv, k_x}, 1).to(s.pool.scalar_type()));
  const auto o = timed(kMlaAttention, [&] {
    auto q_lat = torch::cat({bf16_head_linear(q.narrow(2, 0, Dn).contiguous(), w.w_uk, true), q.narrow(2, Dn, q.size(2) - Dn)}, -1);
    auto o_lat = mla_paged_decode(q_lat.contiguous(), s.pool, s.tables, s.lens, s.block_size, R, w.scale);
    return bf16_head_linear(o_lat, w.w_uv, false).reshape({N, -1}) * sigmoid_invariant(in[2]);
  });
  return gemv(o, w.o_proj);
}

torch::Tensor moe_step(const torch::Tensor& x, const MoeWeights& w) {
  TORCH_CHECK(w.sizes.size() == 3, "MoE step: 3 input widths (latent, shared gate, shared up)");
  const auto& a = w.act;
  const auto logits = gemv(x, w.router);
  auto route = timed(kRowOps, [&] { return moe_route_rows(logits, w.bias, w.top_k, w.renormalise, w.scaling); });
  auto in = split_outputs(gemv(x, w.inputs), w.sizes);
  auto y = timed(kExperts, [&] { return mxfp4_moe_tokens(in[0], w.bank, route[1], route[0], a.code, a.beta, a.linear_beta); });
  y = gemv(timed(kRowOps, [&] { return rms_norm_rows(y, w.norm.weight, w.norm.eps); }), w.up);
  return y + gemv(timed(kRowOps, [&] { return glu_rows(in[1], in[2], a.code, a.beta, a.linear_beta); }), w.shared_down);
}

torch::Tensor mlp_step(const torch::Tensor& x, const MlpWeights& w) {
  TORCH_CHECK(w.sizes.size() == 2, "MLP step: 2 input widths (gate, up)");
  const auto& a = w.act;
  auto in = split_outputs(gemv(x, w.inputs), w.sizes);
  return gemv(timed(kRowOps, [&] { return glu_rows(in[0], in[1], a.code, a.beta, a.linear_beta); }), w.down);
}

}  // namespace

// An attention's decode step: KDA weights with a KDA state, or MLA weights with an MLA cache.
torch::Tensor attention_step(torch::Tensor x, const AttentionWeights& weights, const AttentionState& state) {
  if (const auto* kda = std::get_if<KdaWeights>(&weights)) {
    const auto* s = std::get_if<KdaState>(&state);
    TORCH_CHECK(s != nullptr, "attention step: KDA weights need a KdaState");
    return kda_step(x, *kda, *s);
  }
  const auto* s = std::get_if<MlaState>(&state);
  TORCH_CHECK(s != nullptr, "attention step: MLA weights need an MlaState");
  return mla_step(x, std::get<MlaWeights>(weights), *s);
}

// An FFN's decode step (LatentMoE or the dense GLU MLP).
torch::Tensor ffn_step(torch::Tensor x, const FfnWeights& weights) {
  if (const auto* moe = std::get_if<MoeWeights>(&weights)) return moe_step(x, *moe);
  return mlp_step(x, std::get<MlpWeights>(weights));
}

// Block AttnRes's mix of candidates, then the RMSNorm it feeds (what the registry's attn_res then
// rms_norm run on decode rows: the same two kernels, so the same bits).
torch::Tensor mix_norm_rows(const Tensors& cands, const MixNormWeights& w) {
  return rms_norm_rows(attn_res_mix_weights(cands, w.norm, w.proj, w.eps), w.then.weight, w.then.eps);
}
