// rms_norm_rows: y[n] = x[n] * rsqrt(mean(x[n]^2) + eps) * w, x fp32 [N, D], w bf16 or fp32 [D].
// gated_rms_norm_rows: y[n] = x[n] * rsqrt(mean(x[n]^2) + eps) * w * sigmoid(gate[n]), all fp32 (KDA's
// output norm, per head: N = tokens x heads).
// One call for what is eight (or twelve) small ATen ops on a decode row (each a dispatch of several microseconds).
// Each row is summed in one fixed order (one 8-lane accumulator, then the tail), whatever N is.
#include "k3.h"

namespace k3 {

namespace {

float sum_squares(const float* x, int64_t D) {
  int64_t d = 0;
  float s = 0.f;
#ifdef __AVX2__
  if (g_simd >= 1) {
    __m256 acc = _mm256_setzero_ps();
    for (; d + 8 <= D; d += 8) {
      const __m256 v = _mm256_loadu_ps(x + d);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    s = hsum(acc);
  }
#endif
  for (; d < D; ++d) s += x[d] * x[d];
  return s;
}

}  // namespace

at::Tensor rms_norm_rows(at::Tensor x, at::Tensor w, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x must be contiguous fp32 [N, D]");
  const int64_t N = x.size(0), D = x.size(1);
  TORCH_CHECK(w.dim() == 1 && w.size(0) == D && w.is_contiguous(), "w must be contiguous [D]");
  const bool bf16 = w.scalar_type() == at::kBFloat16;
  TORCH_CHECK(bf16 || w.scalar_type() == at::kFloat, "w must be bf16 or fp32");
  auto y = at::empty({N, D}, x.options());
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const uint16_t* wb = bf16 ? reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>()) : nullptr;
  const float* wf = bf16 ? nullptr : w.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) {
    const float* r = xp + n * D;
    const float scale = 1.0f / std::sqrt(sum_squares(r, D) / static_cast<float>(D) + static_cast<float>(eps));
    float* out = yp + n * D;
    for (int64_t d = 0; d < D; ++d) out[d] = (r[d] * scale) * (bf16 ? bf16_to_f32(wb[d]) : wf[d]);
  }
  return y;
}

at::Tensor gated_rms_norm_rows(at::Tensor x, at::Tensor gate, at::Tensor w, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x must be contiguous fp32 [N, D]");
  TORCH_CHECK(gate.sizes() == x.sizes() && gate.scalar_type() == at::kFloat && gate.is_contiguous(),
              "gate must be contiguous fp32 shaped like x");
  const int64_t N = x.size(0), D = x.size(1);
  TORCH_CHECK(w.dim() == 1 && w.size(0) == D && w.scalar_type() == at::kFloat && w.is_contiguous(),
              "w must be contiguous fp32 [D]");
  auto y = at::empty({N, D}, x.options());
  const float *xp = x.data_ptr<float>(), *gp = gate.data_ptr<float>(), *wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  map8(gp, yp, N * D, [](v8f v) { return vsigmoid(v); });
  for (int64_t n = 0; n < N; ++n) {
    const float* r = xp + n * D;
    const float scale = 1.0f / std::sqrt(sum_squares(r, D) / static_cast<float>(D) + static_cast<float>(eps));
    for (int64_t d = 0; d < D; ++d) yp[n * D + d] = r[d] * scale * wp[d] * yp[n * D + d];
  }
  return y;
}

// glu_rows: the GLU activation (see glu_in_place), g and u fp32 of one shape -> a new tensor. One call,
// vectorised, for the reference's dozen small ATen ops.
at::Tensor glu_rows(at::Tensor g, at::Tensor u, int64_t act, double beta, double linear_beta) {
  TORCH_CHECK(g.scalar_type() == at::kFloat && g.is_contiguous() && u.sizes() == g.sizes() &&
              u.scalar_type() == at::kFloat && u.is_contiguous(), "gate and up must be contiguous fp32 of one shape");
  TORCH_CHECK(act == 0 || act == 1, "act must be 0 (SiTU) or 1 (SiLU)");
  auto y = g.clone();
  // Every element is computed alone (the vector polynomials are lane-wise), so spans of any size give the
  // same bits: prefill-sized inputs are split over threads in spans of kGluSpan.
  constexpr int64_t kGluSpan = 8192;
  const int64_t n = y.numel(), spans = (n + kGluSpan - 1) / kGluSpan;
  float* yp = y.data_ptr<float>();
  const float* up = u.data_ptr<float>();
#pragma omp parallel for schedule(static) if (spans > 1)
  for (int64_t i = 0; i < spans; ++i)
    glu_in_place(yp + i * kGluSpan, up + i * kGluSpan, std::min(kGluSpan, n - i * kGluSpan), act,
                 static_cast<float>(beta), static_cast<float>(linear_beta));
  return y;
}

}  // namespace k3
