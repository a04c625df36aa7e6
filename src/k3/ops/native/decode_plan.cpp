// The decode plan in one native loop: model/plan.py describes the model once as a list of steps on three
// registers (h, the running sum; x, a sublayer's input; y, its output) and the AttnRes bank; Python runs
// that list op by op (any batch, any dtype, autograd), and here the same list runs for N sequences of one
// new token each. Nothing here knows the layer order: it is the list's.
#include "decode.h"
#include <ATen/ops/index_select.h>

namespace k3 {

namespace {

// The steps' numbers, as model/plan.py's Op gives them.
enum PlanOp : int64_t { kNorm = 0, kMixNorm = 1, kPush = 2, kAttention = 3, kFfn = 4, kSet = 5, kAdd = 6, kOpCount };

}  // namespace

// A plan whose every step holds what its op reads (checked once here, not per token).
DecodePlan make_decode_plan(at::Tensor embed, std::vector<PlanStep> steps, Matrix head) {
  TORCH_CHECK(embed.dim() == 2 && embed.is_contiguous() &&
                  (embed.scalar_type() == at::kBFloat16 || embed.scalar_type() == at::kFloat),
              "decode plan: the embedding table must be contiguous bf16 or fp32 [vocab, hidden]");
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& s = steps[i];
    const bool ok = s.op >= 0 && s.op < kOpCount && (s.op != kNorm || s.norm) && (s.op != kMixNorm || s.mix) &&
                    (s.op != kAttention || (s.attention && s.layer >= 0)) && (s.op != kFfn || s.ffn);
    TORCH_CHECK(ok, "decode plan: step ", i, " (op ", s.op, ") lacks the weights its op reads");
  }
  return DecodePlan{embed, std::move(steps), head};
}

namespace {

// Rows ids [N] (int64) of an embedding table as fp32 [N, D]: the bf16 bits become each value's high
// half, exactly as table[ids].to(float32).
at::Tensor embed_rows(const at::Tensor& table, const at::Tensor& ids) {
  TORCH_CHECK(ids.dim() == 1 && ids.scalar_type() == at::kLong && ids.is_contiguous(), "ids must be contiguous int64 [N]");
  const int64_t N = ids.size(0), V = table.size(0);
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t n = 0; n < N; ++n) TORCH_CHECK(id[n] >= 0 && id[n] < V, "token id ", id[n], " out of range [0, ", V, ")");
  const auto picked = table.index_select(0, ids);
  return table.scalar_type() == at::kFloat ? picked : bf16_widen(picked);
}

}  // namespace

// Logits [len(rows) or N, vocab] of N sequences that each bring one new token ids [N]: the embedding rows,
// the plan's steps in order, the rows `rows` of the final x (all when empty) and the head. states[layer]:
// each attention layer's state for this step.
at::Tensor decode_plan(const DecodePlan& plan, at::Tensor ids, const std::vector<AttentionState>& states,
                          at::Tensor rows) {
  PartTimer timer(kPlan);
  at::Tensor h = embed_rows(plan.embed, ids), x, y;
  Tensors bank;
  for (const auto& s : plan.steps) {
    switch (s.op) {
      case kNorm: x = timed(kRowOps, [&] { return rms_norm_rows(h, s.norm->weight, s.norm->eps); }); break;
      case kMixNorm: {
        PartTimer rows_timer(kRowOps);
        Tensors cands(bank);
        cands.push_back(h);
        x = mix_norm_rows(cands, *s.mix);
        break;
      }
      case kPush: bank.push_back(h); break;
      case kAttention:
        TORCH_CHECK(s.layer < static_cast<int64_t>(states.size()), "decode plan: no state for layer ", s.layer);
        y = attention_step(x, *s.attention, states[s.layer]);
        break;
      case kFfn: y = ffn_step(x, *s.ffn); break;
      case kSet: h = y; break;
      case kAdd: h = h + y; break;
    }
  }
  if (rows.numel() > 0) x = x.index_select(0, rows);
  return gemv(x, plan.head);
}

}  // namespace k3
