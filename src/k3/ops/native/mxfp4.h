// MXFP4 for the units that decode its codes (mxfp4.cpp, gemm.cpp): the value tables (E2M1 codes as floats
// and as exact int8 doubles, E8M0 scales as powers of two) and the packed layout's check.
#pragma once

#include "k3.h"

namespace k3 {

inline constexpr int8_t kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
inline constexpr float kE2M1[16] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f,
                                    -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};

struct Pow2Tables {
  float full[256], half[256];  // 2^(s - 127) and 2^(s - 128); byte 255 is NaN
  Pow2Tables() {
    for (int s = 0; s < 256; ++s) {
      full[s] = s == 255 ? NAN : std::ldexp(1.0f, s - 127);
      half[s] = s == 255 ? NAN : std::ldexp(1.0f, s - 128);
    }
  }
};
inline const Pow2Tables kPow2;

// Packed MXFP4 weights as the kernels read them: codes [O, K/2] and E8M0 scales [O, K/32], both uint8.
inline void check_packed(const at::Tensor& packed, const at::Tensor& scale) {
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == at::kByte && packed.is_contiguous(), "packed must be contiguous uint8 [O, K/2]");
  TORCH_CHECK(scale.dim() == 2 && scale.scalar_type() == at::kByte && scale.is_contiguous(), "scale must be contiguous uint8 [O, K/32]");
  TORCH_CHECK(packed.size(1) % 16 == 0 && scale.size(0) == packed.size(0) && scale.size(1) * 16 == packed.size(1),
              "packed/scale shapes do not match group size 32");
}

}  // namespace k3
