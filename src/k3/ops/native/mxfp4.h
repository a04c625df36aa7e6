// MXFP4's value tables, for the units that decode its codes (mxfp4.cpp, gemm.cpp): E2M1 codes as floats
// and as exact int8 doubles, and E8M0 scales as powers of two.
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

}  // namespace k3
