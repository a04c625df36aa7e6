// moe_route_rows: the MoE router's selection for decode rows, in one call (the reference is about a
// dozen small ATen ops):
//   score = sigmoid(logits);  ids = the top_k of score + bias (by value, then by lower expert id);
//   weights = score[ids] (/ (sum + 1e-20) when renormalise and top_k > 1) * scaling.
// logits fp32 [N, E], bias fp32 [E] (or empty: none). Returns weights fp32 [N, k] and ids int64 [N, k],
// each row in descending order of score + bias, as torch.topk gives them.
#include "k3.h"

namespace k3 {

std::vector<at::Tensor> moe_route_rows(at::Tensor logits, at::Tensor bias, int64_t top_k, bool renormalise,
                                          double scaling) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.is_contiguous(),
              "router logits must be contiguous fp32 [N, E]");
  const int64_t N = logits.size(0), E = logits.size(1);
  TORCH_CHECK(top_k >= 1 && top_k <= E, "top_k must be in [1, ", E, "], got ", top_k);
  const bool biased = bias.numel() > 0;
  TORCH_CHECK(!biased || (bias.scalar_type() == at::kFloat && bias.is_contiguous() && bias.numel() == E),
              "the correction bias must be contiguous fp32 [E]");
  auto weights = at::empty({N, top_k}, logits.options());
  auto ids = at::empty({N, top_k}, logits.options().dtype(at::kLong));
  const float* lp = logits.data_ptr<float>();
  const float* bp = biased ? bias.data_ptr<float>() : nullptr;
  float* wp = weights.data_ptr<float>();
  int64_t* ip = ids.data_ptr<int64_t>();
  std::vector<float> score(E), choose(E);
  std::vector<int64_t> order(E);
  for (int64_t n = 0; n < N; ++n) {
    map8(lp + n * E, score.data(), E, [](v8f v) { return vsigmoid(v); });
    for (int64_t e = 0; e < E; ++e) {
      choose[e] = biased ? score[e] + bp[e] : score[e];
      order[e] = e;
    }
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int64_t a, int64_t b) {
      return choose[a] > choose[b] || (choose[a] == choose[b] && a < b);
    });
    float total = 0.f;
    for (int64_t j = 0; j < top_k; ++j) total += score[order[j]];
    const float norm = (renormalise && top_k > 1) ? total + 1e-20f : 1.0f;
    for (int64_t j = 0; j < top_k; ++j) {
      ip[n * top_k + j] = order[j];
      wp[n * top_k + j] = (renormalise && top_k > 1 ? score[order[j]] / norm : score[order[j]]) * static_cast<float>(scaling);
    }
  }
  return {weights, ids};
}

}  // namespace k3
