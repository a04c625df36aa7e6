// mxfp4_linear:     y[n, o] = sum_k x[n, k] W[o, k],  W = E2M1(code) * 2^(scale - 127), packed [O, K/2]
//                   (column 2j in the low nibble), scale [O, K/32] (E8M0)
// mxfp4_glu_expert: one routed expert, h = act(x W1^T, x W3^T), y = h W2^T, all MXFP4.
// mxfp4_moe_token(s): one token (several tokens) through its routed experts, summed in a fixed order.
//
// One unit with its parts, the dot products per instruction set (mxfp4_dots.h) and the opt-in int8
// activations (mxfp4_int8.h), whose helpers stay internal to it.
#include "k3.h"
#include "mxfp4_dots.h"
#include "mxfp4_int8.h"

namespace k3 {

namespace {

// y [m, O] = the rows rows[0..m) of q (0..m when rows is null) times W, with AVX-512 VNNI: W rows in
// fours, the last O % 4 one by one (each summed in the same order).
void mxfp4_rows_vnni(const Int8Blocks& q, const int64_t* rows, int64_t m, int64_t O, const uint8_t* pp,
                     const uint8_t* sp, float* y) {
  const int64_t K = q.K;
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
  for (int64_t o = 0; o < O; o += 4) {
    const uint8_t *p = pp + o * (K / 2), *s = sp + o * (K / 32);
    const int64_t count = std::min<int64_t>(4, O - o);
    const bool plain = scales_plain(s, count * (K / 32));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t n = rows ? rows[i] : i;
      float out[4];
      if (count == 4)
        (plain ? dot_int8_vnni_rows<4, true> : dot_int8_vnni_rows<4, false>)(p, s, q, n, O - o, out);
      else
        for (int64_t r = 0; r < count; ++r)
          (plain ? dot_int8_vnni_rows<1, true> : dot_int8_vnni_rows<1, false>)(p + r * (K / 2), s + r * (K / 32), q, n,
                                                                               O - o - r, out + r);
      for (int64_t r = 0; r < count; ++r) y[i * O + o + r] = out[r];
    }
  }
}

bool int8_vnni() { return g_int8 && g_simd >= 2 && kHasVnni; }

void mxfp4_rows_int8(const float* x, int64_t N, int64_t K, int64_t O, const uint8_t* pp, const uint8_t* sp, float* y) {
  if (int8_vnni()) return mxfp4_rows_vnni(Int8Blocks(x, N, K), nullptr, N, O, pp, sp, y);
  std::vector<int8_t> q(N * K);
  std::vector<float> xs(N * K / 32);
  quantise_groups(x, N, K, q.data(), xs.data());
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < O; ++o)
    for (int64_t n = 0; n < N; ++n) {
#ifdef __AVX2__
      y[n * O + o] = dot_int8_avx2(pp + o * (K / 2), sp + o * (K / 32), q.data() + n * K, xs.data() + n * K / 32, K,
                                   kPow2.half, kE2M1x2);
#endif
    }
}

// Decode's lone row of x times W rows o..o+3 at once (SIMD: four accumulator chains and four decodes in
// flight; see dot_mxfp4_avx512_outs4, dot_mxfp4_avx2_rows).
void mxfp4_outs4(const MxActivations& acts, int64_t K, int64_t O, int64_t o, const uint8_t* pp, const uint8_t* sp,
                 float* y) {
  float out[4];
  if (g_simd >= 2)
    dot_mxfp4_avx512_outs4(pp + o * (K / 2), sp + o * (K / 32), acts.base, K, O - o, out);
#ifdef __AVX2__
  else
    dot_mxfp4_avx2_rows<4>(pp + o * (K / 2), sp + o * (K / 32), acts.base, K, O - o, out);
#endif
  for (int r = 0; r < 4; ++r) y[o + r] = out[r];
}

// One row of W times the M rows of x from n (M = 2, 3 or 4): the codes decoded once for all M.
template <int M>
void dotm_mxfp4(const MxActivations& acts, int64_t n, int64_t K, int64_t O, int64_t o, const uint8_t* p,
                const uint8_t* s, float* y) {
  const float* rows[M];
  for (int j = 0; j < M; ++j) rows[j] = acts.base + (n + j) * K;
  float out[M];
  if (g_simd >= 2)
    dotm_mxfp4_avx512<M>(p, s, rows, K, out);
#ifdef __AVX2__
  else
    dotm_mxfp4_avx2<M>(p, s, rows, K, out);
#endif
  for (int j = 0; j < M; ++j) y[(n + j) * O + o] = out[j];
}

// y [N, O] = x [N, K] W^T, rows of W split over threads (inside a parallel region, as the experts run,
// all on the calling thread: no nested team). Decode's lone row takes W rows in fours (four accumulator
// chains and decodes in flight). More rows go in groups of at most four, as even as they go (5 = 3 + 2),
// each W row's codes decoded once a group, in one pass over W (an expert that several tokens of a verify
// window share is read once); its codes are prefetched two rows ahead: this pass reads one W row at a
// time, and the hardware prefetcher alone did not bring the next ones in time.
// Each output is summed exactly as the one-row dot sums it.
void mxfp4_rows(const float* x, int64_t N, int64_t K, int64_t O, const uint8_t* pp, const uint8_t* sp, float* y) {
  if (g_int8 && g_simd >= 1) return mxfp4_rows_int8(x, N, K, O, pp, sp, y);
  MxActivations acts(x, N, K);
  const bool team = !omp_in_parallel();
  if (N == 1 && g_simd >= 1) {
    const int64_t O4 = O / 4 * 4;
#pragma omp parallel for schedule(static) if (team)
    for (int64_t o = 0; o < O4; o += 4) mxfp4_outs4(acts, K, O, o, pp, sp, y);
    for (int64_t o = O4; o < O; ++o) y[o] = dot_mxfp4(pp + o * (K / 2), sp + o * (K / 32), acts.base, K);
    return;
  }
  const int64_t groups = (N + 3) / 4;
#pragma omp parallel for schedule(static) if (team)
  for (int64_t o = 0; o < O; ++o) {
    const uint8_t* p = pp + o * (K / 2);
    const uint8_t* s = sp + o * (K / 32);
    prefetch_ahead<kPrefetchMxfp4>(s);
    for (int64_t line = 0; line < K / 2; line += 64) prefetch_ahead<kPrefetchMxfp4>(p + line);
    if (g_simd < 1) {
      for (int64_t n = 0; n < N; ++n) y[n * O + o] = dot_mxfp4(p, s, acts.base + n * K, K);
      continue;
    }
    for (int64_t n = 0, g = 0; g < groups; ++g) {
      const int64_t rows = (N - n + groups - g - 1) / (groups - g);   // 2 to 4 rows: N > 1 here
      if (rows == 4) dotm_mxfp4<4>(acts, n, K, O, o, p, s, y);
      else if (rows == 3) dotm_mxfp4<3>(acts, n, K, O, o, p, s, y);
      else dotm_mxfp4<2>(acts, n, K, O, o, p, s, y);
      n += rows;
    }
  }
}

}  // namespace

at::Tensor mxfp4_linear(at::Tensor x, at::Tensor packed, at::Tensor scale) {
  check_packed(packed, scale);
  const int64_t K = packed.size(1) * 2;
  check_x(x, K);
  auto y = at::empty({x.size(0), packed.size(0)}, x.options());
  mxfp4_rows(x.data_ptr<float>(), x.size(0), K, packed.size(0), packed.data_ptr<uint8_t>(), scale.data_ptr<uint8_t>(),
             y.data_ptr<float>());
  return y;
}

namespace {

struct ExpertWeights {  // one expert's three MXFP4 matrices as [out, in/2] codes and [out, in/32] scales
  const uint8_t *w1p, *w1s, *w3p, *w3s, *w2p, *w2s;
};

// act 0: SiTU, beta*tanh(g/beta)*sigmoid(g) * [linear_beta*tanh(u/linear_beta) if linear_beta > 0 else u];
// act 1: silu(g) * u.
void glu_expert(const float* x, int64_t N, int64_t D, int64_t I, const ExpertWeights& w, int64_t act, float b,
                float lb, float* y) {
  std::vector<float> g(N * I), u(N * I);
  mxfp4_rows(x, N, D, I, w.w1p, w.w1s, g.data());
  mxfp4_rows(x, N, D, I, w.w3p, w.w3s, u.data());
  glu_in_place(g.data(), u.data(), N * I, act, b, lb);
  mxfp4_rows(g.data(), N, I, D, w.w2p, w.w2s, y);
}

// glu_expert on the int8 VNNI path for the rows `tokens` [m] of x, quantised once for every expert (the
// same codes glu_expert's own quantisation gives, so the same bits).
void glu_expert_vnni(const Int8Blocks& xq, const int64_t* tokens, int64_t m, int64_t D, int64_t I,
                     const ExpertWeights& w, int64_t act, float b, float lb, float* y) {
  std::vector<float> g(m * I), u(m * I);
  mxfp4_rows_vnni(xq, tokens, m, I, w.w1p, w.w1s, g.data());
  mxfp4_rows_vnni(xq, tokens, m, I, w.w3p, w.w3s, u.data());
  glu_in_place(g.data(), u.data(), m * I, act, b, lb);
  mxfp4_rows_vnni(Int8Blocks(g.data(), m, I), nullptr, m, D, w.w2p, w.w2s, y);
}

void check_bank(const std::vector<at::Tensor>& w, int64_t D) {
  TORCH_CHECK(w.size() == 6, "expected w1/w3/w2 packed and scale tensors");
  for (int m = 0; m < 3; ++m) check_packed(w[2 * m], w[2 * m + 1]);
  const int64_t I = w[0].size(-2);
  TORCH_CHECK(w[0].size(-1) * 2 == D && w[2].size(-2) == I && w[2].size(-1) * 2 == D && w[4].size(-2) == D &&
              w[4].size(-1) * 2 == I, "expert shapes do not match");
}

}  // namespace

// One routed expert: h = act(x W1^T, x W3^T), y = h W2^T. x [N, D]; w = (w1p, w1s, w3p, w3s, w2p, w2s).
at::Tensor mxfp4_glu_expert(at::Tensor x, std::vector<at::Tensor> w, int64_t act, double beta, double linear_beta) {
  check_x(x, x.size(1));
  check_bank(w, x.size(1));
  auto y = at::empty({x.size(0), x.size(1)}, x.options());
  ExpertWeights e{w[0].data_ptr<uint8_t>(), w[1].data_ptr<uint8_t>(), w[2].data_ptr<uint8_t>(), w[3].data_ptr<uint8_t>(),
                  w[4].data_ptr<uint8_t>(), w[5].data_ptr<uint8_t>()};
  glu_expert(x.data_ptr<float>(), x.size(0), x.size(1), w[0].size(0), e, act, beta, linear_beta, y.data_ptr<float>());
  return y;
}

// One token through several experts of a bank [E, ...]: acc = sum_i weights[i] * expert_{ids[i]}(x), in
// the order given, each product rounded to fp32 and then added (as the MoE layer's Python loop does).
at::Tensor mxfp4_moe_token(at::Tensor x, std::vector<at::Tensor> bank, std::vector<int64_t> ids,
                              std::vector<double> weights, int64_t act, double beta, double linear_beta) {
  const int64_t D = x.size(1);
  check_x(x, D);
  TORCH_CHECK(x.size(0) == 1 && ids.size() == weights.size(), "one token and one weight per expert");
  std::vector<at::Tensor> first;  // expert 0 of each tensor: the per-expert shapes to check
  for (const auto& t : bank) {
    TORCH_CHECK(t.dim() == 3 && t.is_contiguous() && t.size(0) == bank[0].size(0), "bank tensors must be contiguous [E, out, in]");
    first.push_back(t.select(0, 0));
  }
  check_bank(first, D);
  const int64_t E = bank[0].size(0), I = bank[0].size(1);
  for (int64_t e : ids) TORCH_CHECK(e >= 0 && e < E, "expert id ", e, " out of range [0, ", E, ")");
  // Experts run in parallel, one per thread (their inner products then run single-threaded): one
  // fork/join per token and layer instead of three per expert. The sum stays in the order given.
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<float> ys(n * D);
  std::vector<const uint8_t*> base;
  std::vector<int64_t> stride;
  for (const auto& t : bank) {
    base.push_back(t.data_ptr<uint8_t>());
    stride.push_back(t.stride(0));
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    auto at = [&](int m) { return base[m] + ids[i] * stride[m]; };
    glu_expert(x.data_ptr<float>(), 1, D, I, ExpertWeights{at(0), at(1), at(2), at(3), at(4), at(5)}, act, beta,
               linear_beta, ys.data() + i * D);
  }
  auto acc = at::zeros({1, D}, x.options());
  float* a = acc.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float wi = static_cast<float>(weights[i]);
    for (int64_t d = 0; d < D; ++d) a[d] += ys[i * D + d] * wi;
  }
  return acc;
}

// Several tokens through a bank: out[n] = sum over j of weights[n, j] * expert_{ids[n, j]}(x[n]), each token's
// products added in ascending expert order (as the one-token kernel adds a sorted list and the MoE layer's
// per-expert loop adds them). Each expert the tokens use runs once, on its rows only, one expert per
// thread: each weight byte is read once for the whole batch, and every row equals its one-row result.
at::Tensor mxfp4_moe_tokens(at::Tensor x, std::vector<at::Tensor> bank, at::Tensor ids,
                               at::Tensor weights, int64_t act, double beta, double linear_beta) {
  const int64_t D = x.size(1), N = x.size(0);
  check_x(x, D);
  TORCH_CHECK(ids.dim() == 2 && ids.size(0) == N && ids.scalar_type() == at::kLong && ids.is_contiguous(),
              "ids must be contiguous int64 [N, k]");
  TORCH_CHECK(weights.sizes() == ids.sizes() && weights.scalar_type() == at::kFloat && weights.is_contiguous(),
              "weights must be contiguous fp32 [N, k]");
  std::vector<at::Tensor> first;
  for (const auto& t : bank) {
    TORCH_CHECK(t.dim() == 3 && t.is_contiguous() && t.size(0) == bank[0].size(0), "bank tensors must be contiguous [E, out, in]");
    first.push_back(t.select(0, 0));
  }
  check_bank(first, D);
  const int64_t E = bank[0].size(0), I = bank[0].size(1), k = ids.size(1);
  const int64_t* id = ids.data_ptr<int64_t>();
  const float* wt = weights.data_ptr<float>();
  std::vector<std::vector<int64_t>> slots(E);   // expert -> flat (n * k + j) entries routed to it, by n
  for (int64_t i = 0; i < N * k; ++i) {
    TORCH_CHECK(id[i] >= 0 && id[i] < E, "expert id ", id[i], " out of range [0, ", E, ")");
    slots[id[i]].push_back(i);
  }
  std::vector<int64_t> used;
  for (int64_t e = 0; e < E; ++e)
    if (!slots[e].empty()) used.push_back(e);
  std::vector<float> ys(N * k * D);             // entry i's expert output, at row i
  std::vector<const uint8_t*> base;
  std::vector<int64_t> stride;
  for (const auto& t : bank) {
    base.push_back(t.data_ptr<uint8_t>());
    stride.push_back(t.stride(0));
  }
  const float* xp = x.data_ptr<float>();
  std::unique_ptr<Int8Blocks> xq;   // the int8 VNNI path quantises x once for every expert
  if (int8_vnni()) xq = std::make_unique<Int8Blocks>(xp, N, D);
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t u = 0; u < used.size(); ++u) {
    const int64_t e = used[u];
    const auto& rows = slots[e];
    const int64_t m = static_cast<int64_t>(rows.size());
    std::vector<int64_t> tokens(m);
    for (int64_t r = 0; r < m; ++r) tokens[r] = rows[r] / k;
    auto at = [&](int mat) { return base[mat] + e * stride[mat]; };
    const ExpertWeights w{at(0), at(1), at(2), at(3), at(4), at(5)};
    std::vector<float> out(m * D);
    if (xq) {
      glu_expert_vnni(*xq, tokens.data(), m, D, I, w, act, beta, linear_beta, out.data());
    } else {
      std::vector<float> in(m * D);
      for (int64_t r = 0; r < m; ++r) std::copy(xp + tokens[r] * D, xp + (tokens[r] + 1) * D, in.data() + r * D);
      glu_expert(in.data(), m, D, I, w, act, beta, linear_beta, out.data());
    }
    for (int64_t r = 0; r < m; ++r) std::copy(out.data() + r * D, out.data() + (r + 1) * D, ys.data() + rows[r] * D);
  }
  auto acc = at::zeros({N, D}, x.options());
  float* a = acc.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) {
    std::vector<int64_t> order(k);
    for (int64_t j = 0; j < k; ++j) order[j] = n * k + j;
    std::sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return id[p] < id[q]; });
    for (int64_t i : order)
      for (int64_t d = 0; d < D; ++d) a[n * D + d] += ys[i * D + d] * wt[i];
  }
  return acc;
}

// Dequantise packed MXFP4 [O, K/2] + scales [O, K/32] to fp32 [O, K] (exact: every value is a 2-bit
// mantissa times a power of two). Prefill decodes expert tiles with this before an fp32 GEMM.
at::Tensor mxfp4_dequantize(at::Tensor packed, at::Tensor scale) {
  check_packed(packed, scale);
  const int64_t O = packed.size(0), K = packed.size(1) * 2, G = K / 32;
  auto w = at::empty({O, K}, at::dtype(at::kFloat));
  const uint8_t* pp = packed.data_ptr<uint8_t>();
  const uint8_t* sp = scale.data_ptr<uint8_t>();
  float* wp = w.data_ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < O; ++o)
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* b = pp + o * (K / 2) + g * 16;
      const float s = kPow2.full[sp[o * G + g]];
      float* out = wp + o * K + g * 32;
      for (int j = 0; j < 16; ++j) {
        out[2 * j] = kE2M1[b[j] & 0xF] * s;
        out[2 * j + 1] = kE2M1[b[j] >> 4] * s;
      }
    }
  return w;
}

// Turns the int8-activation MXFP4 path on or off for every later call; returns the previous setting.
bool set_int8_activations(bool on) {
  const bool was = g_int8;
  g_int8 = on;
  return was;
}

}  // namespace k3
