// Decode steps as whole native calls, for the layers' bound steps (layers/direct.py):
//   kda_decode_step, mla_decode_step, moe_decode_step, mlp_decode_step: one sublayer's step after its
//   input norm (MLA's writes its latents into the paged cache first);
//   attn_res_norm_rows: Block AttnRes's mix and the norm it feeds;
//   layer_decode: a whole Block-AttnRes decoder layer.
// Each calls the kernels the Python steps called, in their order and on the same tensors, so the bits are
// the same; what it saves is the interpreter between them (about a dozen calls, splits and views a
// layer), which ran with its own data evicted by the weight streams. Matrices come as (weight, scale)
// pairs: bf16 with an empty scale, or int8 codes with their bf16 scales.

namespace {

using Tensors = std::vector<torch::Tensor>;
using Ints = std::vector<int64_t>;

torch::Tensor gemv(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& scale) {
  PartTimer timer(kGemv);
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
  const auto f = gemv(in[4], mats[2], mats[3]);
  auto gates = timed(kRowOps, [&] { return kda_gates_rows(f, in[5], a_log, dt_bias, bounded, lower_bound); });
  auto o = timed(kKdaRecurrence, [&] {
    return kda_decode_slots(in[0], in[1], in[2], conv[0], conv[1], conv[2], tails[0], tails[1], tails[2], S, index,
                            gates[0], gates[1], scale);
  });
  o = timed(kRowOps, [&] { return gated_rms_norm_rows(o.view({N * H, D}), in[3].view({N * H, D}), o_norm, eps); });
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
  const auto logits = gemv(x, mats[0], mats[1]);
  auto route = timed(kRowOps, [&] { return moe_route_rows(logits, bias, top_k, renormalise, scaling); });
  auto in = split_outputs(gemv(x, mats[2], mats[3]), sizes);
  auto y = timed(kExperts, [&] { return mxfp4_moe_tokens(in[0], bank, route[1], route[0], act, beta, linear_beta); });
  y = gemv(timed(kRowOps, [&] { return rms_norm_rows(y, norm, eps); }), mats[4], mats[5]);
  return y + gemv(timed(kRowOps, [&] { return glu_rows(in[1], in[2], act, beta, linear_beta); }), mats[6], mats[7]);
}

namespace {

// torch.sigmoid as k3.ops.elementwise.sigmoid calls it: on the flattened input padded to a multiple of 64
// elements, so every element takes ATen's vector form whatever the row count.
torch::Tensor sigmoid_invariant(const torch::Tensor& x) {
  const int64_t n = x.numel(), pad = (64 - n % 64) % 64;
  if (pad == 0) return torch::sigmoid(x);
  return torch::sigmoid(torch::constant_pad_nd(x.reshape({-1}), {0, pad})).narrow(0, 0, n).view(x.sizes());
}

// Gated MLA's decode step up to the cache append: mats are the input group (q_a, kv_a, gate) and q_b_proj.
// Returns q [N, H * (Dn + Dr)], c_kv [N, R] (normalised), k_x [N, Dr] (a view) and the output gate's
// projection [N, H * v].
Tensors mla_inputs(const torch::Tensor& x, const Tensors& mats, const Ints& sizes, const torch::Tensor& q_a_norm,
                   double q_a_eps, const torch::Tensor& kv_a_norm, double kv_a_eps, int64_t R) {
  TORCH_CHECK(sizes.size() == 3 && R < sizes[1], "MLA step: 3 input widths (q_a, kv_a, gate), rank below kv_a's");
  auto in = split_outputs(gemv(x, mats[0], mats[1]), sizes);
  auto q = gemv(rms_norm_rows(in[0], q_a_norm, q_a_eps), mats[2], mats[3]);
  auto c_kv = rms_norm_rows(in[1].narrow(1, 0, R).contiguous(), kv_a_norm, kv_a_eps);
  return {q, c_kv, in[1].narrow(1, R, in[1].size(1) - R), in[2]};
}

// The rest, after the append: absorbed attention over the paged latents (as mla_paged_decode takes
// them), W_UV, the sigmoid output gate and o_proj ((weight, scale) o_w, o_s). q [N, H, Dn + Dr].
torch::Tensor mla_attend(const torch::Tensor& q, const torch::Tensor& w_uk, const torch::Tensor& w_uv,
                         const torch::Tensor& pool, const torch::Tensor& tables, const torch::Tensor& lens,
                         int64_t block_size, int64_t rank, double scale, const torch::Tensor& gate,
                         const torch::Tensor& o_w, const torch::Tensor& o_s) {
  const int64_t N = q.size(0), Dn = w_uk.size(1);
  const auto o = timed(kMlaAttention, [&] {
    auto q_lat = torch::cat({bf16_head_linear(q.narrow(2, 0, Dn).contiguous(), w_uk, true), q.narrow(2, Dn, q.size(2) - Dn)}, -1);
    auto o_lat = mla_paged_decode(q_lat.contiguous(), pool, tables, lens, block_size, rank, scale);
    return bf16_head_linear(o_lat, w_uv, false).reshape({N, -1}) * sigmoid_invariant(gate);
  });
  return gemv(o, o_w, o_s);
}

}  // namespace

// Gated MLA's whole decode step on its paged cache: the projections, this step's latents written to
// pool rows new_rows [N] (in the pool's dtype, as the cache views write them), then attention over the
// paged latents (lens count the new token) and o_proj. mats: the input group (q_a, kv_a, gate), q_b_proj,
// o_proj; w_uk [H, Dn, R] and w_uv [H, v, R]: kv_b_proj's halves (bf16, contiguous rows).
torch::Tensor mla_decode_step(torch::Tensor x, std::vector<torch::Tensor> mats, std::vector<int64_t> sizes,
                              torch::Tensor q_a_norm, double q_a_eps, torch::Tensor kv_a_norm, double kv_a_eps,
                              torch::Tensor w_uk, torch::Tensor w_uv, double scale, torch::Tensor pool,
                              torch::Tensor tables, torch::Tensor lens, int64_t block_size, torch::Tensor new_rows) {
  check_pairs(mats, 3);
  TORCH_CHECK(w_uk.dim() == 3 && w_uv.dim() == 3, "MLA step: w_uk [H, Dn, R] and w_uv [H, v, R]");
  const int64_t N = x.size(0), H = w_uk.size(0), R = w_uk.size(2);
  TORCH_CHECK(new_rows.dim() == 1 && new_rows.size(0) == N && new_rows.scalar_type() == torch::kLong,
              "MLA step: one new pool row (int64) per sequence");
  auto in = mla_inputs(x, mats, sizes, q_a_norm, q_a_eps, kv_a_norm, kv_a_eps, R);
  pool.index_copy_(0, new_rows, torch::cat({in[1], in[2]}, 1).to(pool.scalar_type()));
  return mla_attend(in[0].view({N, H, -1}), w_uk, w_uv, pool, tables, lens, block_size, R, scale, in[3], mats[4], mats[5]);
}

// The dense GLU MLP's decode step: mats are the fused gate/up group and down_proj; act as glu_rows takes it.
torch::Tensor mlp_decode_step(torch::Tensor x, std::vector<torch::Tensor> mats, std::vector<int64_t> sizes, int64_t act,
                              double beta, double linear_beta) {
  check_pairs(mats, 2);
  TORCH_CHECK(sizes.size() == 2, "MLP step: 2 input widths (gate, up)");
  auto in = split_outputs(gemv(x, mats[0], mats[1]), sizes);
  return gemv(timed(kRowOps, [&] { return glu_rows(in[0], in[1], act, beta, linear_beta); }), mats[2], mats[3]);
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

// ("kda", kda_decode_step's arguments after x) or ("mla", mla_decode_step's).
torch::Tensor run_attention(const torch::Tensor& x, const pybind11::tuple& a) {
  const auto kind = arg<std::string>(a, 0);
  if (kind == "kda") {
    TORCH_CHECK(a.size() == 14, "KDA step: 13 arguments after x, got ", a.size() - 1);
    return kda_decode_step(x, arg<Tensors>(a, 1), arg<Ints>(a, 2), arg<torch::Tensor>(a, 3), arg<torch::Tensor>(a, 4),
                           arg<bool>(a, 5), arg<double>(a, 6), arg<Tensors>(a, 7), arg<Tensors>(a, 8),
                           arg<torch::Tensor>(a, 9), arg<torch::Tensor>(a, 10), arg<torch::Tensor>(a, 11),
                           arg<double>(a, 12), arg<double>(a, 13));
  }
  TORCH_CHECK(kind == "mla" && a.size() == 15, "attention step: (\"kda\", 13 arguments) or (\"mla\", 14 arguments)");
  return mla_decode_step(x, arg<Tensors>(a, 1), arg<Ints>(a, 2), arg<torch::Tensor>(a, 3), arg<double>(a, 4),
                         arg<torch::Tensor>(a, 5), arg<double>(a, 6), arg<torch::Tensor>(a, 7), arg<torch::Tensor>(a, 8),
                         arg<double>(a, 9), arg<torch::Tensor>(a, 10), arg<torch::Tensor>(a, 11),
                         arg<torch::Tensor>(a, 12), arg<int64_t>(a, 13), arg<torch::Tensor>(a, 14));
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
  PartTimer timer(kRowOps);
  if (bank.empty()) return rms_norm_rows(h, rows[0], eps[0]);
  Tensors cands(bank);
  cands.push_back(h);
  return attn_res_norm_rows(cands, rows[2], rows[3], eps[2], rows[0], eps[0]);
}

// A whole Block-AttnRes decoder layer, in the order its Python forward runs (so the same bits): the
// attention input (the AttnRes mix of bank + [h] when the bank has entries, then input_layernorm), the
// attention step, the block's partial sum, the FFN input (mix of the bank, with h appended at a block
// start, + [partial], then post_attention_layernorm), and partial + FFN. Appends h to bank at a block start.
// layer: (block_start, rows, eps, attention, ffn); rows: input_layernorm, post_attention_layernorm, then
// the attention's and the MLP's AttnRes norm and proj weights; eps: the two norms' and AttnRes's.
torch::Tensor run_layer(const torch::Tensor& h, Tensors& bank, const pybind11::tuple& layer) {
  TORCH_CHECK(layer.size() == 5, "layer step: (block_start, rows, eps, attention, ffn)");
  const bool block_start = arg<bool>(layer, 0);
  const auto rows = arg<Tensors>(layer, 1);
  const auto eps = arg<std::vector<double>>(layer, 2);
  TORCH_CHECK(rows.size() == 6 && eps.size() == 3, "layer step: 6 row weights and 3 epsilons");
  const auto y = run_attention(attention_input(h, bank, rows, eps), arg<pybind11::tuple>(layer, 3));
  const torch::Tensor partial = block_start ? y : h + y;
  if (block_start) bank.push_back(h);
  Tensors cands(bank);
  cands.push_back(partial);
  const auto x = timed(kRowOps, [&] { return attn_res_norm_rows(cands, rows[4], rows[5], eps[2], rows[1], eps[1]); });
  return partial + run_ffn(x, arg<pybind11::tuple>(layer, 4));
}

}  // namespace

// One decoder layer's decode step (run_layer) on a copy of bank; the caller appends h to its own bank at
// a block start.
torch::Tensor layer_decode(torch::Tensor h, std::vector<torch::Tensor> bank, pybind11::tuple layer) {
  PartTimer timer(kLayerCall);
  return run_layer(h, bank, layer);
}

// Rows ids [N] (int64) of an embedding table [V, D] (bf16 or fp32) as fp32 [N, D]: the bf16 bits become
// each value's high half, exactly as table[ids].to(float32).
torch::Tensor embed_rows(const torch::Tensor& table, const torch::Tensor& ids) {
  TORCH_CHECK(table.dim() == 2 && table.is_contiguous() &&
                  (table.scalar_type() == torch::kBFloat16 || table.scalar_type() == torch::kFloat32),
              "embedding table must be contiguous bf16 or fp32 [vocab, hidden]");
  TORCH_CHECK(ids.dim() == 1 && ids.scalar_type() == torch::kLong && ids.is_contiguous(), "ids must be contiguous int64 [N]");
  const int64_t N = ids.size(0), V = table.size(0);
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t n = 0; n < N; ++n) TORCH_CHECK(id[n] >= 0 && id[n] < V, "token id ", id[n], " out of range [0, ", V, ")");
  const auto picked = table.index_select(0, ids);
  return table.scalar_type() == torch::kFloat32 ? picked : bf16_widen(picked);
}

// A whole model's decode step for N sequences of one new token each, in the order the Python forward runs
// (so the same bits): the embedding rows, every layer as layer_decode runs it (the AttnRes bank carried
// from layer to layer), the output AttnRes mix and final norm (attn_res_norm_rows), the rows `rows` of
// that (all when empty), and the vocabulary projection (head, scale as gemv takes them).
// layers: each as layer_decode takes it; output: the mix's norm and proj weights, then the final norm's;
// eps: the mix's and the final norm's.
torch::Tensor token_decode(torch::Tensor ids, torch::Tensor embed, std::vector<pybind11::tuple> layers,
                           std::vector<torch::Tensor> output, std::vector<double> eps, torch::Tensor head,
                           torch::Tensor head_scale, torch::Tensor rows) {
  TORCH_CHECK(output.size() == 3 && eps.size() == 2, "token step: 3 output weights (mix norm, mix proj, norm) and 2 epsilons");
  torch::Tensor h = embed_rows(embed, ids);
  Tensors bank;
  for (const auto& layer : layers) {
    PartTimer timer(kLayerCall);
    h = run_layer(h, bank, layer);
  }
  bank.push_back(h);
  auto x = attn_res_norm_rows(bank, output[0], output[1], eps[0], output[2], eps[1]);
  if (rows.numel() > 0) x = x.index_select(0, rows);
  return head_scale.numel() == 0 ? bf16_linear(x, head) : int8_linear(x, head, head_scale);
}
