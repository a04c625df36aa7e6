// The settings Python chooses at load (k3/ops/native/__init__.py): the instruction set, the decode GEMVs' and
// prefetches' memory access, the FPU's denormal mode; each returns the previous setting.
#include "k3.h"

namespace k3 {

// Chooses the instruction set (0 scalar, 1 AVX2+FMA, 2 AVX-512) within what this build has; returns it.
int64_t set_simd(int64_t level) {
#ifdef __AVX2__
  g_simd = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(level, 2)));
#else
  g_simd = 0;
#endif
  return g_simd;
}

// How the SIMD GEMVs (bf16_linear, int8_linear) read W for a lone row of x (decode): sequentially, row
// after row, where one row of W holds at most `bytes`, else in tiles of rows (eight with AVX-512, four with
// AVX2); 0 reads every W in tiles. Each output's sum is the same either way. Returns the previous setting.
int64_t set_gemv_sequential_bytes(int64_t bytes) {
  const int64_t before = g_gemv_sequential_bytes;
  g_gemv_sequential_bytes = std::max<int64_t>(0, bytes);
  return before;
}

// The hint of the decode products' weight-stream prefetches: non-temporal (true) or into every cache
// level (false). Results do not depend on it. Returns the previous setting.
bool set_prefetch_nta(bool on) {
  const bool before = g_prefetch_nta;
  g_prefetch_nta = on;
  return before;
}

// Whether the CPU has AVX512_BF16 (vdpbf16ps), which the bf16 dot-product GEMMs use at the AVX-512 level
// (gemm_dot.cpp; without it they round x and run the fp32 GEMM). Returns the previous setting.
bool set_bf16_dot(bool on) {
  const bool before = g_bf16_dot;
  g_bf16_dot = on;
  return before;
}

// Flush-to-zero and denormals-are-zero (MXCSR bits 15 and 6) on the calling thread (the region's thread
// 0) and every thread of the OpenMP pool, which ATen and MKL share with these kernels (one libgomp per process). Chunked KDA
// multiplies long decay products whose subnormal results x86 handles through microcode assists: a
// batched matmul with subnormal operands is many times slower. Returns whether it was on before.
bool set_flush_denormal(bool on) {
  const unsigned bits = 0x8040;
  const bool before = (_mm_getcsr() & bits) == bits;
#pragma omp parallel
  {
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(on ? (csr | bits) : (csr & ~bits));
  }
  return before;
}

}  // namespace k3
