// The decode plan's typed weights and states (built once when the plan binds: model/plan_binding.py; Python
// sees them as classes with named fields: bindings.cpp), and the entry points of decode_steps.cpp and
// decode_plan.cpp. Matrices are (weight, scale): bf16 with an empty scale, or int8 codes with their bf16
// scales.
#pragma once

#include "k3.h"
#include <ATen/TensorOperators.h>
#include <optional>
#include <variant>

namespace k3 {

struct Matrix {
  at::Tensor weight, scale;   // scale: empty for bf16
};

// An RMSNorm's weight and epsilon.
struct NormWeights {
  at::Tensor weight;
  double eps;
};

// Block AttnRes's mix (pseudo-query norm ⊙ proj, its epsilon) and the RMSNorm it feeds.
struct MixNormWeights {
  at::Tensor norm, proj;
  double eps;
  NormWeights then;
};

// KimiDeltaAttention: the input group [q, k, v, gate, f_a, b] (`sizes` its widths), f_b_proj, o_proj; the
// gate parameters; q/k/v conv taps [P, Kc]; the output norm; the query scale.
struct KdaWeights {
  Matrix inputs;
  Ints sizes;
  Matrix f_b, o_proj;
  at::Tensor a_log, dt_bias;
  bool bounded;
  double lower_bound;
  Tensors conv;
  at::Tensor o_norm;
  double eps, scale;
};

// A KDA step's state: the recurrent pool [slots, H, K, V], the q/k/v conv tail pools, and each sequence's
// slot [n] (int64); each sequence brings `positions` rows (1: decode; more: a verify window, its rows
// position by position). `replay`: empty, or where a window's step inputs go (q, k, v [n, T, P], g
// [n, T, H, K], beta [n, T, H]), from which the engine replays kept positions after a rejection.
struct KdaState {
  at::Tensor recurrent;
  Tensors tails;
  at::Tensor index;
  int64_t positions;
  Tensors replay;
};

// Gated MLA: the input group (q_a, kv_a, gate), q_b_proj, o_proj; the two low-rank norms; kv_b_proj's
// halves w_uk [H, Dn, R] and w_uv [H, v, R] (bf16); the softmax scale.
struct MlaWeights {
  Matrix inputs;
  Ints sizes;
  Matrix q_b, o_proj;
  NormWeights q_a_norm, kv_a_norm;
  at::Tensor w_uk, w_uv;
  double scale;
};

// An MLA decode step's cache: the paged pool, block tables and lengths (counting the new token) as
// mla_paged_decode reads them, and the pool row each sequence's new latents go to [N] (int64).
struct MlaState {
  at::Tensor pool, tables, lens;
  int64_t block_size;
  at::Tensor new_rows;
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
  at::Tensor bias;
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

// One step, with the weights its op reads (bound once: model/plan_binding.py). `layer` picks the
// attention state of the call for an attention step.
struct PlanStep {
  int64_t op, layer;
  std::optional<NormWeights> norm;
  std::optional<MixNormWeights> mix;
  std::optional<AttentionWeights> attention;
  std::optional<FfnWeights> ffn;
};

// A whole model's bound plan: the embedding table [V, D] (bf16 or fp32), the steps, the vocabulary head.
struct DecodePlan {
  at::Tensor embed;
  std::vector<PlanStep> steps;
  Matrix head;
};

// decode_steps.cpp: one sublayer's decode step on rows x [N, hidden] fp32; the AttnRes mix and the RMSNorm
// it feeds; a Linear's decode GEMV.
at::Tensor attention_step(at::Tensor x, const AttentionWeights& weights, const AttentionState& state);
at::Tensor ffn_step(at::Tensor x, const FfnWeights& weights);
at::Tensor mix_norm_rows(const Tensors& cands, const MixNormWeights& w);
at::Tensor gemv(const at::Tensor& x, const Matrix& m);

// decode_plan.cpp
DecodePlan make_decode_plan(at::Tensor embed, std::vector<PlanStep> steps, Matrix head);
at::Tensor decode_plan(const DecodePlan& plan, at::Tensor ids, const std::vector<AttentionState>& states,
                       at::Tensor rows);

}  // namespace k3
