// The part timers' switch and totals (the timers themselves are in k3.h, where every unit sees them).
#include "k3.h"

namespace k3 {

// Turns the part timers on or off and zeroes their totals; returns the previous setting.
bool set_part_timing(bool on) {
  const bool before = g_part_timing;
  g_part_timing = on;
  std::fill(g_part_seconds, g_part_seconds + kPartCount, 0.0);
  return before;
}

// Seconds per part since set_part_timing (parts nest: decode_plan holds the others).
std::map<std::string, double> part_seconds() {
  std::map<std::string, double> out;
  for (int p = 0; p < kPartCount; ++p) out[kPartNames[p]] = g_part_seconds[p];
  return out;
}

}  // namespace k3
