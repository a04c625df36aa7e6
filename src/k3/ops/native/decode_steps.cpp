// Decode steps as whole native calls, for the layers' bound steps (layers/direct.py):
//   kda_decode_step, moe_decode_step, mlp_decode_step, mla_decode_inputs / mla_decode_attend: one
//   sublayer's step after its input norm (MLA's split around the cache append);
//   attn_res_norm_rows: Block AttnRes's mix and the norm it feeds;
//   kda_layer_decode: a whole Block-AttnRes decoder layer with KDA attention; layer_decode_input /
//   layer_decode_output: the two ends of one whose attention (MLA) runs in between.
// Each calls the kernels the Python steps called, in their order and on the same tensors, so the bits are
// the same; what it saves is the interpreter between them (about a dozen calls, splits and views a
// layer), which ran with its own data evicted by the weight streams. Matrices come as (weight, scale)
// pairs: bf16 with an empty scale, or int8 codes with their bf16 scales.

namespace {

torch::Tensor gemv(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& scale) {
  return scale.numel() == 0 ? bf16_linear(x, w) : int8_linear(x, w, scale);
}

// A fused group's product split into its members' outputs, each contiguous ([N, out_i]).
std::vector<torch::Tensor> split_outputs(const torch::Tensor& y, const std::vector<int64_t>& sizes) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : y.split_with_sizes(sizes, 1)) parts.push_back(p.contiguous());
  return parts;
}

void check_pairs(const std::vector<torch::Tensor>& mats, size_t n) {
  TORCH_CHECK(mats.size() == 2 * n, "expected ", n, " (weight, scale) pairs, got ", mats.size(), " tensors");
}

}  // namespace

// mats: input group, f_b, o_proj; sizes: the input group's [q, k, v, gate, f_a, b] widths; conv: q/k/v taps
// [P, Kc]; tails: q/k/v tail pools; S, index: the recurrent pool [slots, H, K, V] and slot index; scale: the
// query scale (all as kda_decode_slots takes them).
torch::Tensor kda_decode_step(torch::Tensor x, std::vector<torch::Tensor> mats, std::vector<int64_t> sizes,
                              torch::Tensor a_log, torch::Tensor dt_bias, bool bounded, double lower_bound,
                              std::vector<torch::Tensor> conv, std::vector<torch::Tensor> tails, torch::Tensor S,
                              torch::Tensor index, torch::Tensor o_norm, double eps, double scale) {
  check_pairs(mats, 3);
  TORCH_CHECK(sizes.size() == 6 && conv.size() == 3 && tails.size() == 3, "KDA step: 6 input widths, 3 convs, 3 tails");
  TORCH_CHECK(S.dim() == 4, "state pool must be [slots, H, K, V]");
  const int64_t N = x.size(0), H = S.size(1), D = S.size(3);
  auto in = split_outputs(gemv(x, mats[0], mats[1]), sizes);
  auto gates = kda_gates_rows(gemv(in[4], mats[2], mats[3]), in[5], a_log, dt_bias, bounded, lower_bound);
  auto o = kda_decode_slots(in[0], in[1], in[2], conv[0], conv[1], conv[2], tails[0], tails[1], tails[2], S, index,
                            gates[0], gates[1], scale);
  o = gated_rms_norm_rows(o.view({N * H, D}), in[3].view({N * H, D}), o_norm, eps);
  return gemv(o.view({N, H * D}), mats[4], mats[5]);
}

// mats: router, input group (latent down, shared gate, shared up), latent up, shared down; bank: the
// experts' w1/w3/w2 codes and scales; act as mxfp4_moe_tokens and glu_rows take it.
torch::Tensor moe_decode_step(torch::Tensor x, std::vector<torch::Tensor> mats, std::vector<int64_t> sizes,
                              torch::Tensor bias, int64_t top_k, bool renormalise, double scaling,
                              std::vector<torch::Tensor> bank, int64_t act, double beta, double linear_beta,
                              torch::Tensor norm, double eps) {
  check_pairs(mats, 4);
  TORCH_CHECK(sizes.size() == 3, "MoE step: 3 input widths (latent, shared gate, shared up)");
  auto route = moe_route_rows(gemv(x, mats[0], mats[1]), bias, top_k, renormalise, scaling);
  auto in = split_outputs(gemv(x, mats[2], mats[3]), sizes);
  auto y = mxfp4_moe_tokens(in[0], bank, route[1], route[0], act, beta, linear_beta);
  y = gemv(rms_norm_rows(y, norm, eps), mats[4], mats[5]);
  return y + gemv(glu_rows(in[1], in[2], act, beta, linear_beta), mats[6], mats[7]);
}

namespace {

// torch.sigmoid as k3.ops.elementwise.sigmoid calls it: on the flattened input padded to a multiple of 64
// elements, so every element takes ATen's vector form whatever the row count.
torch::Tensor sigmoid_invariant(const torch::Tensor& x) {
  const int64_t n = x.numel(), pad = (64 - n % 64) % 64;
  if (pad == 0) return torch::sigmoid(x);
  return torch::sigmoid(torch::constant_pad_nd(x.reshape({-1}), {0, pad})).narrow(0, 0, n).view(x.sizes());
}

}  // namespace

// Gated MLA's decode step up to the cache append: mats are the input group (q_a, kv_a, gate) and q_b_proj.
// Returns q [N, H * (Dn + Dr)], c_kv [N, R] (normalised), k_x [N, Dr] (a view) and the output gate's
// projection [N, H * v].
std::vector<torch::Tensor> mla_decode_inputs(torch::Tensor x, std::vector<torch::Tensor> mats, std::vector<int64_t> sizes,
                                             torch::Tensor q_a_norm, double q_a_eps, torch::Tensor kv_a_norm,
                                             double kv_a_eps, int64_t R) {
  check_pairs(mats, 2);
  TORCH_CHECK(sizes.size() == 3 && R < sizes[1], "MLA step: 3 input widths (q_a, kv_a, gate), rank below kv_a's");
  auto in = split_outputs(gemv(x, mats[0], mats[1]), sizes);
  auto q = gemv(rms_norm_rows(in[0], q_a_norm, q_a_eps), mats[2], mats[3]);
  auto c_kv = rms_norm_rows(in[1].narrow(1, 0, R).contiguous(), kv_a_norm, kv_a_eps);
  return {q, c_kv, in[1].narrow(1, R, in[1].size(1) - R), in[2]};
}

// The rest, after the append: absorbed attention over the paged latents (as mla_paged_decode takes
// them), W_UV, the sigmoid output gate and o_proj (mats: its (weight, scale)). q [N, H, Dn + Dr];
// w_uk [H, Dn, R] and w_uv [H, v, R]: kv_b_proj's halves (bf16, contiguous rows).
torch::Tensor mla_decode_attend(torch::Tensor q, torch::Tensor w_uk, torch::Tensor w_uv, torch::Tensor pool,
                                torch::Tensor tables, torch::Tensor lens, int64_t block_size, int64_t rank,
                                double scale, torch::Tensor gate, std::vector<torch::Tensor> mats) {
  check_pairs(mats, 1);
  TORCH_CHECK(q.dim() == 3, "q must be [N, H, Dn + Dr]");
  const int64_t N = q.size(0), H = q.size(1), Dn = w_uk.size(1);
  auto q_lat = torch::cat({bf16_head_linear(q.narrow(2, 0, Dn).contiguous(), w_uk, true), q.narrow(2, Dn, q.size(2) - Dn)}, -1);
  auto o_lat = mla_paged_decode(q_lat.contiguous(), pool, tables, lens, block_size, rank, scale);
  auto o = bf16_head_linear(o_lat, w_uv, false).reshape({N, -1});
  return gemv(o * sigmoid_invariant(gate), mats[0], mats[1]);
}

// The dense GLU MLP's decode step: mats are the fused gate/up group and down_proj; act as glu_rows takes it.
torch::Tensor mlp_decode_step(torch::Tensor x, std::vector<torch::Tensor> mats, std::vector<int64_t> sizes, int64_t act,
                              double beta, double linear_beta) {
  check_pairs(mats, 2);
  TORCH_CHECK(sizes.size() == 2, "MLP step: 2 input widths (gate, up)");
  auto in = split_outputs(gemv(x, mats[0], mats[1]), sizes);
  return gemv(glu_rows(in[0], in[1], act, beta, linear_beta), mats[2], mats[3]);
}

// Block AttnRes's mix of a decode step's candidates, then the RMSNorm of the sublayer it feeds (the
// decoder layer's two row kernels in one call; the same bits).
torch::Tensor attn_res_norm_rows(std::vector<torch::Tensor> cands, torch::Tensor norm, torch::Tensor proj, double eps,
                                 torch::Tensor ln, double ln_eps) {
  return rms_norm_rows(attn_res_mix_weights(cands, norm, proj, eps), ln, ln_eps);
}

namespace {

template <typename T>
T arg(const pybind11::tuple& t, size_t i) {
  return t[i].cast<T>();
}

using Tensors = std::vector<torch::Tensor>;
using Ints = std::vector<int64_t>;

// kda: kda_decode_step's arguments after x, in its order.
torch::Tensor run_kda(const torch::Tensor& x, const pybind11::tuple& a) {
  TORCH_CHECK(a.size() == 13, "KDA step: 13 arguments after x, got ", a.size());
  return kda_decode_step(x, arg<Tensors>(a, 0), arg<Ints>(a, 1), arg<torch::Tensor>(a, 2), arg<torch::Tensor>(a, 3),
                         arg<bool>(a, 4), arg<double>(a, 5), arg<Tensors>(a, 6), arg<Tensors>(a, 7),
                         arg<torch::Tensor>(a, 8), arg<torch::Tensor>(a, 9), arg<torch::Tensor>(a, 10),
                         arg<double>(a, 11), arg<double>(a, 12));
}

// ffn: ("moe", moe_decode_step's arguments after x) or ("mlp", mlp_decode_step's).
torch::Tensor run_ffn(const torch::Tensor& x, const pybind11::tuple& f) {
  const auto kind = arg<std::string>(f, 0);
  if (kind == "moe") {
    TORCH_CHECK(f.size() == 13, "MoE step: 12 arguments after x, got ", f.size() - 1);
    return moe_decode_step(x, arg<Tensors>(f, 1), arg<Ints>(f, 2), arg<torch::Tensor>(f, 3), arg<int64_t>(f, 4),
                           arg<bool>(f, 5), arg<double>(f, 6), arg<Tensors>(f, 7), arg<int64_t>(f, 8),
                           arg<double>(f, 9), arg<double>(f, 10), arg<torch::Tensor>(f, 11), arg<double>(f, 12));
  }
  TORCH_CHECK(kind == "mlp" && f.size() == 6, "FFN step: (\"moe\", ...) or (\"mlp\", 5 arguments)");
  return mlp_decode_step(x, arg<Tensors>(f, 1), arg<Ints>(f, 2), arg<int64_t>(f, 3), arg<double>(f, 4), arg<double>(f, 5));
}

// A Block-AttnRes layer's attention input: the mix of bank + [h] (when the bank has entries), normed.
torch::Tensor attention_input(const torch::Tensor& h, const Tensors& bank, const Tensors& rows, const std::vector<double>& eps) {
  if (bank.empty()) return rms_norm_rows(h, rows[0], eps[0]);
  Tensors cands(bank);
  cands.push_back(h);
  return attn_res_norm_rows(cands, rows[2], rows[3], eps[2], rows[0], eps[0]);
}

// The rest of the layer from the attention's output y: the partial sum, the FFN input (mix of the bank,
// with h appended at a block start, + [partial], normed) and partial + FFN.
torch::Tensor after_attention(const torch::Tensor& h, const Tensors& bank, bool block_start, const Tensors& rows,
                              const std::vector<double>& eps, const torch::Tensor& y, const pybind11::tuple& ffn) {
  torch::Tensor partial = block_start ? y : h + y;
  Tensors cands(bank);
  if (block_start) cands.push_back(h);
  cands.push_back(partial);
  return partial + run_ffn(attn_res_norm_rows(cands, rows[4], rows[5], eps[2], rows[1], eps[1]), ffn);
}

void check_rows(const Tensors& rows, const std::vector<double>& eps) {
  TORCH_CHECK(rows.size() == 6 && eps.size() == 3, "layer step: 6 row weights and 3 epsilons");
}

}  // namespace

// The two ends of a Block-AttnRes decoder layer whose attention runs elsewhere (MLA, whose cache append
// sits inside): layer_decode_input -> the attention's normed input; layer_decode_output -> the layer's
// output from the attention's y. Arguments as kda_layer_decode's; the caller appends h to its bank at a
// block start, after both.
torch::Tensor layer_decode_input(torch::Tensor h, std::vector<torch::Tensor> bank, std::vector<torch::Tensor> rows,
                                 std::vector<double> eps) {
  check_rows(rows, eps);
  return attention_input(h, bank, rows, eps);
}

torch::Tensor layer_decode_output(torch::Tensor h, std::vector<torch::Tensor> bank, bool block_start,
                                  std::vector<torch::Tensor> rows, std::vector<double> eps, torch::Tensor y,
                                  pybind11::tuple ffn) {
  check_rows(rows, eps);
  return after_attention(h, bank, block_start, rows, eps, y, ffn);
}

// A whole Block-AttnRes decoder layer with KDA attention, for its bound step (model/block.py), in the
// order its Python forward runs (so the same bits): the attention input (the AttnRes mix of bank + [h]
// when the bank has entries, then input_layernorm), the KDA step, the block's partial sum, the FFN input
// (mix of the bank, with h appended at a block start, + [partial], then post_attention_layernorm), and
// partial + FFN. rows: input_layernorm, post_attention_layernorm, then the attention's and the MLP's
// AttnRes norm and proj weights; eps: the two norms' epsilons and AttnRes's. The caller appends h to its
// bank at a block start.
torch::Tensor kda_layer_decode(torch::Tensor h, std::vector<torch::Tensor> bank, bool block_start,
                               std::vector<torch::Tensor> rows, std::vector<double> eps, pybind11::tuple kda,
                               pybind11::tuple ffn) {
  check_rows(rows, eps);
  return after_attention(h, bank, block_start, rows, eps, run_kda(attention_input(h, bank, rows, eps), kda), ffn);
}
