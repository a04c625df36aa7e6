// The sublayers' decode steps, each one native call on decode rows x [N, hidden] fp32, for the decode plan
// (decode_plan.cpp, model/plan.py). Each calls the kernels the layer's Python forward picks through the
// registry, in its order and on the same tensors, so the bits are the same; what it saves is the
// interpreter between them (about a dozen calls, splits and views a sublayer).
//
// Weights arrive as typed structs (decode.h), built once when the plan binds and kept until the weights
// change; a step's state (KDA's slots, MLA's paged cache) as a struct built per step.
#include "decode.h"
#include <ATen/ops/cat.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/sigmoid.h>

namespace k3 {

at::Tensor gemv(const at::Tensor& x, const Matrix& m) {
  PartTimer timer(kGemv);
  return m.scale.numel() == 0 ? bf16_linear(x, m.weight) : int8_linear(x, m.weight, m.scale);
}

namespace {

// A fused group's product split into its members' outputs, each contiguous ([N, out_i]).
Tensors split_outputs(const at::Tensor& y, const Ints& sizes) {
  Tensors parts;
  for (const auto& p : y.split_with_sizes(sizes, 1)) parts.push_back(p.contiguous());
  return parts;
}

// A window's step inputs into s.replay (each its own shape, the same values in order), for the replay.
void keep_replay(const KdaState& s, const Tensors& inputs) {
  static const char* names[] = {"q", "k", "v", "g", "beta"};
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(s.replay[i].numel() == inputs[i].numel() && s.replay[i].is_contiguous() &&
                    s.replay[i].scalar_type() == at::kFloat,
                "KDA step: replay tensor ", i, " (", names[i], ") must be contiguous fp32 holding ", inputs[i].sizes(),
                " (", inputs[i].numel(), " values), got ", s.replay[i].sizes());
    s.replay[i].view(inputs[i].sizes()).copy_(inputs[i]);
  }
}

// x [n * T, hidden]: T = s.positions rows a sequence (decode: 1; a verify window: its positions in turn,
// stepped in one call with the bits of T one-token calls).
at::Tensor kda_step(const at::Tensor& x, const KdaWeights& w, const KdaState& s) {
  TORCH_CHECK(w.sizes.size() == 6 && w.conv.size() == 3 && s.tails.size() == 3,
              "KDA step: 6 input widths, 3 convs, 3 tails");
  TORCH_CHECK(s.recurrent.dim() == 4, "KDA step: the state pool must be [slots, H, K, V]");
  const int64_t N = x.size(0), H = s.recurrent.size(1), K = s.recurrent.size(2), D = s.recurrent.size(3), T = s.positions;
  TORCH_CHECK(T >= 1 && N == s.index.size(0) * T, "KDA step: ", N, " rows for ", s.index.size(0),
              " sequences of ", T, " positions");
  TORCH_CHECK(s.replay.empty() || s.replay.size() == 5, "KDA step: replay holds q, k, v, g and beta, or nothing");
  auto in = split_outputs(gemv(x, w.inputs), w.sizes);
  const auto f = gemv(in[4], w.f_b);
  auto gates = timed(kRowOps, [&] { return kda_gates_rows(f, in[5], w.a_log, w.dt_bias, w.bounded, w.lower_bound); });
  if (!s.replay.empty()) keep_replay(s, {in[0], in[1], in[2], gates[0], gates[1]});
  auto o = timed(kKdaRecurrence, [&] {
    if (T == 1)
      return kda_decode_slots(in[0], in[1], in[2], w.conv[0], w.conv[1], w.conv[2], s.tails[0], s.tails[1], s.tails[2],
                              s.recurrent, s.index, gates[0], gates[1], w.scale);
    const int64_t n = N / T;
    return kda_window_slots(in[0].view({n, T, -1}), in[1].view({n, T, -1}), in[2].view({n, T, -1}), w.conv[0], w.conv[1],
                            w.conv[2], s.tails[0], s.tails[1], s.tails[2], s.recurrent, s.index,
                            gates[0].view({n, T, H, K}), gates[1].view({n, T, H}), w.scale);
  });
  o = timed(kRowOps, [&] { return gated_rms_norm_rows(o.reshape({N * H, D}), in[3].view({N * H, D}), w.o_norm, w.eps); });
  return gemv(o.view({N, H * D}), w.o_proj);
}

// torch.sigmoid as k3.ops.elementwise.sigmoid calls it: on the flattened input padded to a multiple of 64
// elements, so every element takes ATen's vector form whatever the row count.
at::Tensor sigmoid_invariant(const at::Tensor& x) {
  const int64_t n = x.numel(), pad = (64 - n % 64) % 64;
  if (pad == 0) return at::sigmoid(x);
  return at::sigmoid(at::constant_pad_nd(x.reshape({-1}), {0, pad})).narrow(0, 0, n).view(x.sizes());
}

// Gated MLA's step on its paged cache: the projections, this step's latents written to the pool rows
// new_rows (in the pool's dtype, as the cache views write them), absorbed attention over the paged
// latents, W_UV, the sigmoid output gate and o_proj.
at::Tensor mla_step(const at::Tensor& x, const MlaWeights& w, const MlaState& s) {
  TORCH_CHECK(w.w_uk.dim() == 3 && w.w_uv.dim() == 3, "MLA step: w_uk [H, Dn, R] and w_uv [H, v, R]");
  const int64_t N = x.size(0), H = w.w_uk.size(0), Dn = w.w_uk.size(1), R = w.w_uk.size(2);
  TORCH_CHECK(w.sizes.size() == 3 && R < w.sizes[1], "MLA step: 3 input widths (q_a, kv_a, gate), rank below kv_a's");
  TORCH_CHECK(s.new_rows.dim() == 1 && s.new_rows.size(0) == N && s.new_rows.scalar_type() == at::kLong,
              "MLA step: one new pool row (int64) per sequence");
  auto in = split_outputs(gemv(x, w.inputs), w.sizes);
  const auto q = gemv(rms_norm_rows(in[0], w.q_a_norm.weight, w.q_a_norm.eps), w.q_b).view({N, H, -1});
  const auto c_kv = rms_norm_rows(in[1].narrow(1, 0, R).contiguous(), w.kv_a_norm.weight, w.kv_a_norm.eps);
  const auto k_x = in[1].narrow(1, R, in[1].size(1) - R);
  s.pool.index_copy_(0, s.new_rows, at::cat({c_kv, k_x}, 1).to(s.pool.scalar_type()));
  const auto o = timed(kMlaAttention, [&] {
    auto q_lat = at::cat({bf16_head_linear(q.narrow(2, 0, Dn).contiguous(), w.w_uk, true), q.narrow(2, Dn, q.size(2) - Dn)}, -1);
    auto o_lat = mla_paged_decode(q_lat.contiguous(), s.pool, s.tables, s.lens, s.block_size, R, w.scale);
    return bf16_head_linear(o_lat, w.w_uv, false).reshape({N, -1}) * sigmoid_invariant(in[2]);
  });
  return gemv(o, w.o_proj);
}

at::Tensor moe_step(const at::Tensor& x, const MoeWeights& w) {
  TORCH_CHECK(w.sizes.size() == 3, "MoE step: 3 input widths (latent, shared gate, shared up)");
  const auto& a = w.act;
  const auto logits = gemv(x, w.router);
  auto route = timed(kRowOps, [&] { return moe_route_rows(logits, w.bias, w.top_k, w.renormalise, w.scaling); });
  auto in = split_outputs(gemv(x, w.inputs), w.sizes);
  auto y = timed(kExperts, [&] { return mxfp4_moe_tokens(in[0], w.bank, route[1], route[0], a.code, a.beta, a.linear_beta); });
  y = gemv(timed(kRowOps, [&] { return rms_norm_rows(y, w.norm.weight, w.norm.eps); }), w.up);
  return y + gemv(timed(kRowOps, [&] { return glu_rows(in[1], in[2], a.code, a.beta, a.linear_beta); }), w.shared_down);
}

at::Tensor mlp_step(const at::Tensor& x, const MlpWeights& w) {
  TORCH_CHECK(w.sizes.size() == 2, "MLP step: 2 input widths (gate, up)");
  const auto& a = w.act;
  auto in = split_outputs(gemv(x, w.inputs), w.sizes);
  return gemv(timed(kRowOps, [&] { return glu_rows(in[0], in[1], a.code, a.beta, a.linear_beta); }), w.down);
}

}  // namespace

// An attention's decode step: KDA weights with a KDA state, or MLA weights with an MLA cache.
at::Tensor attention_step(at::Tensor x, const AttentionWeights& weights, const AttentionState& state) {
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
at::Tensor ffn_step(at::Tensor x, const FfnWeights& weights) {
  if (const auto* moe = std::get_if<MoeWeights>(&weights)) return moe_step(x, *moe);
  return mlp_step(x, std::get<MlpWeights>(weights));
}

// Block AttnRes's mix of candidates, then the RMSNorm it feeds (what the registry's attn_res then
// rms_norm run on decode rows: the same two kernels, so the same bits).
at::Tensor mix_norm_rows(const Tensors& cands, const MixNormWeights& w) {
  return rms_norm_rows(attn_res_mix_weights(cands, w.norm, w.proj, w.eps), w.then.weight, w.then.eps);
}

}  // namespace k3
