#include "runtime/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"

namespace bertlab {

int64_t wsd_decay_steps(const LrScheduleOptions& o) {
  return o.decay_steps > 0 ? o.decay_steps : std::llround(o.decay_ratio * static_cast<double>(o.max_steps));
}

void check_lr_schedule(const LrScheduleOptions& o) {
  const bool wsd = o.schedule == LrSchedule::wsd;
  check(wsd || (o.decay_steps == 0 && o.decay_ratio == 0 && o.min_lr_ratio == 0),
        "--decay-steps, --decay-ratio and --min-lr-ratio belong to --lr-schedule wsd (the schedule is {})",
        to_string(o.schedule));
  if (!wsd) return;
  check(o.decay_steps >= 0 && o.decay_ratio >= 0 && o.decay_ratio <= 1,
        "--lr-schedule wsd: --decay-steps {} / --decay-ratio {}: expected a non-negative count / a fraction in [0, 1]",
        o.decay_steps, o.decay_ratio);
  check(!(o.decay_steps > 0 && o.decay_ratio > 0), "--lr-schedule wsd: give --decay-steps ({}) or --decay-ratio ({}), not both",
        o.decay_steps, o.decay_ratio);
  check(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1, "--min-lr-ratio {}: expected a fraction in [0, 1]", o.min_lr_ratio);
  const int64_t decay = wsd_decay_steps(o);
  const std::string decay_flag = o.decay_ratio > 0 ? fmt::format("--decay-ratio {} ({} steps)", o.decay_ratio, decay)
                                                   : fmt::format("--decay-steps {}", decay);
  check(decay > 0, "--lr-schedule wsd needs a decay: give --decay-steps N or --decay-ratio F (now {})", decay_flag);
  check(o.warmup_steps + decay <= o.max_steps,
        "--lr-schedule wsd: --warmup-steps {} + {} do not fit in --max-steps {} (warmup and decay together are {} steps)",
        o.warmup_steps, decay_flag, o.max_steps, o.warmup_steps + decay);
}

float learning_rate(const LrScheduleOptions& o, int64_t step) {
  // As Hugging Face's schedules, evaluated at the 0-based index of the step.
  const double t = static_cast<double>(step - 1);
  const bool one_cycle = o.schedule == LrSchedule::one_cycle;
  const int64_t warmup = one_cycle && o.warmup_steps == 0 ? o.max_steps / 2 : o.warmup_steps;
  if (warmup > 0 && t < warmup) return static_cast<float>(o.lr * t / warmup);
  switch (o.schedule) {
    case LrSchedule::constant:
      return o.lr;
    case LrSchedule::wsd: {
      // Held at the peak; over the last D steps linear from the peak towards lr x min_lr_ratio,
      // reached at max_steps (as the linear schedule reaches 0 there).
      const double decay = static_cast<double>(std::max<int64_t>(1, wsd_decay_steps(o)));
      const double left = std::clamp((static_cast<double>(o.max_steps) - t) / decay, 0.0, 1.0);
      return static_cast<float>(o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * left));
    }
    case LrSchedule::linear:
    case LrSchedule::polynomial:
    case LrSchedule::one_cycle: {
      const double span = std::max<double>(1, o.max_steps - warmup);
      const double left = std::max(0.0, 1.0 - (t - warmup) / span);
      return static_cast<float>(o.lr * (o.schedule == LrSchedule::polynomial ? std::pow(left, o.power) : left));
    }
  }
  fail("unknown learning-rate schedule {}", static_cast<int>(o.schedule));
}

}  // namespace bertlab
