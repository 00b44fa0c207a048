#pragma once
// The learning rate of every kind of training (`train`, `finetune`), step by step: a linear
// warmup, then a decay to max_steps, as Hugging Face's schedules.
#include <cstdint>

#include "base/enum_table.h"

namespace bertlab {

// The learning rate after warmup (--lr-schedule): linear, polynomial or constant decay to
// max_steps; one-cycle: the warmup is half of max_steps unless given; wsd (warmup-stable-decay,
// trapezoid): held at the peak, then linear decay over the last decay steps.
#define BERTLAB_LR_SCHEDULES(X) \
  X(linear, "linear") X(polynomial, "polynomial") X(constant, "constant") X(one_cycle, "one-cycle") X(wsd, "wsd")
BERTLAB_ENUM(LrSchedule, uint8_t, BERTLAB_LR_SCHEDULES)

struct LrScheduleOptions {
  float lr = 1e-4f;  // the peak
  int64_t max_steps = 0;
  int64_t warmup_steps = 0;  // one-cycle: 0 is half of max_steps
  LrSchedule schedule = LrSchedule::linear;
  int64_t decay_steps = 0;  // wsd: the linear decay's steps at the end (or:)
  double decay_ratio = 0;   // wsd: ... as a fraction of max_steps (one of the two)
  double min_lr_ratio = 0;  // wsd: the decay ends at lr x this instead of 0
  float power = 1.0f;       // polynomial decay power
};

// Learning rate at a 1-based step: linear warmup, then linear/polynomial decay to 0 at max_steps
// (one-cycle: the warmup is half of max_steps unless warmup_steps is given; wsd: held at the
// peak until the last wsd_decay_steps(s) steps, then linear down to lr x min_lr_ratio).
float learning_rate(const LrScheduleOptions& s, int64_t step);
// wsd: the decay's steps, from decay_steps or decay_ratio x max_steps (rounded).
int64_t wsd_decay_steps(const LrScheduleOptions& s);
// Refuses a schedule that does not fit max_steps (wsd: warmup + decay > max_steps), or decay
// flags without wsd, naming the flags and their values.
void check_lr_schedule(const LrScheduleOptions& s);

}  // namespace bertlab
