// Wall-clock totals per part of the native decode steps, for benchmarks/decode_profile.py: off unless
// set_part_timing(true), when each PartTimer adds its scope's duration (on the calling thread, outside
// parallel regions) to its part. Off, a timer costs one branch.

namespace {

enum DecodePart { kPlan, kGemv, kExperts, kKdaRecurrence, kMlaAttention, kRowOps, kPartCount };
const char* const kPartNames[kPartCount] = {"decode_plan", "gemv", "experts", "kda_recurrence", "mla_attention",
                                            "row_ops"};
bool g_part_timing = false;
double g_part_seconds[kPartCount] = {};

class PartTimer {
 public:
  explicit PartTimer(DecodePart part) : part_(part), on_(g_part_timing) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  ~PartTimer() {
    if (on_)
      g_part_seconds[part_] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  PartTimer(const PartTimer&) = delete;
  PartTimer& operator=(const PartTimer&) = delete;

 private:
  DecodePart part_;
  bool on_;   // as set when the scope began (its start time is read only then)
  std::chrono::steady_clock::time_point start_;
};

// f() with its duration added to `part`.
template <class F>
auto timed(DecodePart part, F f) {
  PartTimer timer(part);
  return f();
}

}  // namespace

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
