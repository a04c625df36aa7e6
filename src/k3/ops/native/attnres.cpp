// attn_res_mix: Block AttnRes, one pass per candidate (rows over threads when there are many):
//   score_j[n] = (V_j[n] . q) / sqrt(mean(V_j[n]^2) + eps);  alpha[n] = softmax_j(score[n]);
//   out[n] = sum_j alpha_j[n] V_j[n]
// candidates: J tensors fp32 [N, D] (the depth bank, then the current partial sum); query fp32 [D].
// The reference (k3.ops.attnres.attn_res_mix) stacks the candidates and makes about eight passes.
// attn_res_mix_weights: the same with the pseudo-query formed here, q = norm ⊙ proj in fp32 (norm [D],
// proj [1, D], bf16 or fp32): a decode step needs it at every layer, and forming it in ATen was three
// small ops (two of them bf16 widenings) a call.
#include "k3.h"

namespace k3 {

namespace {

// (sum x^2, sum x q) over D values.
std::pair<float, float> square_and_dot(const float* x, const float* q, int64_t D) {
  int64_t d = 0;
  float ss = 0.f, dot = 0.f;
#ifdef __AVX2__
  if (g_simd >= 1) {
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    for (; d + 8 <= D; d += 8) {
      __m256 v = _mm256_loadu_ps(x + d);
      a = _mm256_fmadd_ps(v, v, a);
      b = _mm256_fmadd_ps(v, _mm256_loadu_ps(q + d), b);
    }
    ss = hsum(a);
    dot = hsum(b);
  }
#endif
  for (; d < D; ++d) {
    ss += x[d] * x[d];
    dot += x[d] * q[d];
  }
  return {ss, dot};
}

}  // namespace

namespace {

// cands checked by check_candidates; q [D].
at::Tensor mix(const std::vector<at::Tensor>& cands, const float* q, double eps) {
  const int64_t J = static_cast<int64_t>(cands.size()), N = cands[0].size(0), D = cands[0].size(1);
  auto out = at::zeros({N, D}, cands[0].options());
  // Rows are independent (each summed alone, so the same bits in any batch): prefill's split over threads.
#pragma omp parallel for schedule(static) if (N > 64)
  for (int64_t n = 0; n < N; ++n) {
    std::vector<float> alpha(J);
    float top = -INFINITY;
    for (int64_t j = 0; j < J; ++j) {
      auto [ss, dot] = square_and_dot(cands[j].data_ptr<float>() + n * D, q, D);
      alpha[j] = dot / std::sqrt(ss / static_cast<float>(D) + static_cast<float>(eps));
      top = std::max(top, alpha[j]);
    }
    float total = 0.f;
    for (int64_t j = 0; j < J; ++j) total += (alpha[j] = std::exp(alpha[j] - top));
    float* o = out.data_ptr<float>() + n * D;
    for (int64_t j = 0; j < J; ++j) {
      const float a = alpha[j] / total;
      const float* v = cands[j].data_ptr<float>() + n * D;
      for (int64_t d = 0; d < D; ++d) o[d] += a * v[d];
    }
  }
  return out;
}

void check_candidates(const std::vector<at::Tensor>& cands, int64_t D) {
  for (const auto& c : cands)
    TORCH_CHECK(c.dim() == 2 && c.scalar_type() == at::kFloat && c.is_contiguous() && c.size(0) == cands[0].size(0) &&
                c.size(1) == D, "candidates must be contiguous fp32 [N, D] of one shape");
}

// w [D] (bf16 or fp32) as fp32 values.
std::vector<float> widened(const at::Tensor& w) {
  std::vector<float> out(w.numel());
  if (w.scalar_type() == at::kBFloat16) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
    for (size_t d = 0; d < out.size(); ++d) out[d] = bf16_to_f32(p[d]);
  } else {
    std::copy(w.data_ptr<float>(), w.data_ptr<float>() + w.numel(), out.begin());
  }
  return out;
}

}  // namespace

at::Tensor attn_res_mix(std::vector<at::Tensor> cands, at::Tensor query, double eps) {
  TORCH_CHECK(!cands.empty(), "attn_res_mix needs at least one candidate");
  const int64_t D = cands[0].size(-1);
  check_candidates(cands, D);
  TORCH_CHECK(query.scalar_type() == at::kFloat && query.is_contiguous() && query.numel() == D, "query must be fp32 [D]");
  return mix(cands, query.data_ptr<float>(), eps);
}

at::Tensor attn_res_mix_weights(std::vector<at::Tensor> cands, at::Tensor norm, at::Tensor proj, double eps) {
  TORCH_CHECK(!cands.empty(), "attn_res_mix needs at least one candidate");
  const int64_t D = cands[0].size(-1);
  check_candidates(cands, D);
  for (const auto* w : {&norm, &proj})
    TORCH_CHECK((w->scalar_type() == at::kFloat || w->scalar_type() == at::kBFloat16) && w->is_contiguous() &&
                w->numel() == D, "AttnRes norm and proj weights must be contiguous bf16 or fp32 with ", D, " entries");
  std::vector<float> q = widened(norm);
  const std::vector<float> p = widened(proj);
  for (int64_t d = 0; d < D; ++d) q[d] *= p[d];
  return mix(cands, q.data(), eps);
}

}  // namespace k3
