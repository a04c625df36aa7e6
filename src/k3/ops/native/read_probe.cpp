// read_sum: every byte of a buffer read once, with each thread streaming its own contiguous share through
// the widest loads the level has (four independent accumulators, so the loads are never waiting on an add):
// the machine's read bandwidth as the threads see it, with no arithmetic worth the name beside the loads.
// A GEMV over the same bytes (benchmarks/compare.py's other probe) adds the multiply-adds a decode really
// does; decode time over this probe's floor is how far a decode is from the memory system's peak.
// The sum is returned so that the compiler cannot drop the reads.
#include "k3.h"

namespace k3 {

namespace {

// The words of whole 256-byte blocks; *done: how many bytes that was.
K3_AVX512 uint64_t sum_avx512(const uint8_t* p, int64_t n, int64_t* done) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 256 <= n; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 192));
  }
  *done = i;
  return _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}

uint64_t sum_level(const uint8_t* p, int64_t n) {
  int64_t i = 0;
  uint64_t s = g_simd >= 2 ? sum_avx512(p, n, &i) : 0;
#ifdef __AVX2__
  if (g_simd == 1) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 128 <= n; i += 128) {
      a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
      a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
      a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
      a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                       _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  }
#endif
  uint64_t w[4] = {0, 0, 0, 0};
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 4; ++j) {
      uint64_t v;
      std::memcpy(&v, p + i + 8 * j, 8);
      w[j] += v;
    }
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    w[0] += v;
  }
  s += w[0] + w[1] + w[2] + w[3];
  for (; i < n; ++i) s += p[i];
  return s;
}

}  // namespace

// The wrapping 64-bit sum of a contiguous buffer's 8-byte words (bytes past the last whole word added
// one by one), read by all OpenMP threads, each its own contiguous share (whole 4 KB pages).
uint64_t read_sum(at::Tensor buffer) {
  TORCH_CHECK(buffer.is_contiguous() && buffer.device().is_cpu(), "read_sum needs a contiguous CPU tensor");
  const uint8_t* p = static_cast<const uint8_t*>(buffer.data_ptr());
  const int64_t n = buffer.numel() * buffer.element_size();
  uint64_t total = 0;
#pragma omp parallel reduction(+ : total)
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t share = (n / threads + 4095) / 4096 * 4096;
    const int64_t start = std::min(n, t * share), stop = std::min(n, start + share);
    total += sum_level(p + start, stop - start);
  }
  return total;
}

}  // namespace k3
