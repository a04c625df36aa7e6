// bf16_linear:     y[n, o] = sum_k x[n, k] w[o, k]            x fp32 [N, K], w bf16 [O, K]
// bf16_head_linear: per head h, y[n, h, r] = sum_c w[h, r, c] x[n, h, c]   (transpose false)
//                              y[n, h, c] = sum_r w[h, r, c] x[n, h, r]   (transpose true)
//                   x fp32 [N, H, in], w bf16 [H, R, C] with contiguous rows (any head/row strides):
//                   MLA's absorbed decode multiplies by both halves of kv_b_proj without widening them.

torch::Tensor bf16_linear(torch::Tensor x, torch::Tensor w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kBFloat16 && w.is_contiguous(), "w must be contiguous bf16 [O, K]");
  const int64_t N = x.size(0), K = w.size(1), O = w.size(0);
  check_x(x, K);
  auto y = torch::empty({N, O}, x.options());
  const float* xp = x.data_ptr<float>();
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  float* yp = y.data_ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < O; ++o)
    for (int64_t n = 0; n < N; ++n) yp[n * O + o] = dot_bf16(wp + o * K, xp + n * K, K);
  return y;
}

torch::Tensor bf16_head_linear(torch::Tensor x, torch::Tensor w, bool transpose) {
  TORCH_CHECK(w.dim() == 3 && w.scalar_type() == torch::kBFloat16 && w.stride(2) == 1, "w must be bf16 [H, R, C] with contiguous rows");
  TORCH_CHECK(x.dim() == 3 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "x must be contiguous fp32 [N, H, in]");
  const int64_t N = x.size(0), H = w.size(0), R = w.size(1), C = w.size(2);
  const int64_t in = transpose ? R : C, out = transpose ? C : R;
  TORCH_CHECK(x.size(1) == H && x.size(2) == in, "x must be [N, H, ", in, "]");
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  const int64_t hs = w.stride(0), rs = w.stride(1);
  const float* xp = x.data_ptr<float>();
  auto y = torch::zeros({N, H, out}, x.options());
  float* yp = y.data_ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t nh = 0; nh < N * H; ++nh) {
    const int64_t h = nh % H;
    const float* xr = xp + nh * in;
    float* yr = yp + nh * out;
    if (transpose)
      for (int64_t r = 0; r < R; ++r) axpy_bf16(xr[r], wp + h * hs + r * rs, yr, C);
    else
      for (int64_t r = 0; r < R; ++r) yr[r] = dot_bf16(wp + h * hs + r * rs, xr, C);
  }
  return y;
}
