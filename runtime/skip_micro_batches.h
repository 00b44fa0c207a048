#pragma once
// --on-nonfinite skip with gradient accumulation: a step whose loss or gradients are not finite
// leaves out the micro-batches at fault and updates with the others, exactly as if they had been
// its only micro-batches (the losses divided by the counts of those alone; each micro-batch keeps
// its own dropout stream). Shared by the pretraining step (runtime/train_step) and the
// fine-tuning step (runtime/finetune).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/params.h"
#include "runtime/run_loop.h"

namespace bertlab {

// The parts of one accumulated optimizer step, supplied by the step.
struct AccumulationParts {
  // Zeroes the gradients, then runs forward and backward of the micro-batches `use` (0-based,
  // ascending) into them, each loss divided by the counts of `use` alone. Returns, for each
  // micro-batch of `use` in order, why its loss is not finite, or "" when it is.
  std::function<std::vector<std::string>(const std::vector<int64_t>& use)> accumulate;
  // The optimizer: applies the update and returns true when the gradient norm is finite;
  // otherwise leaves the parameters and moments alone and returns false.
  std::function<bool()> update;
  // The first parameter whose gradient holds a NaN or an infinity, or "" when none does.
  std::function<std::string()> first_non_finite_gradient;
};

// The first parameter of `grads` holding a NaN or an infinity, or "" when none does.
std::string first_non_finite(const ParamStore& grads);

// The micro-batches of a failed pass to name in its NonfiniteError: those of `loss_reasons`
// (one per micro-batch) that are not empty, or every one of the `K` when none is (the gradients
// failed, and which micro-batch's is not known). Each has `what` as its reason.
std::vector<DroppedMicroBatch> micro_batches_at_fault(const std::vector<std::string>& loss_reasons, int64_t K,
                                                      const std::string& what);

// After `parts.accumulate` over all K micro-batches of step `step` (`loss_reasons`, one per
// micro-batch) found a loss not finite, or every loss finite and `parts.update` the gradients
// not finite: finds the micro-batches at fault (by their loss, else by their own gradients, one
// at a time), and when they are fewer than K and at most `may_drop`, accumulates the others again
// and updates. Returns the micro-batches left out. Throws NonfiniteError naming them, with no
// update applied, when all K are at fault, more than `may_drop` are, or the others' gradients
// are not finite together although each one's are.
std::vector<DroppedMicroBatch> update_without_non_finite(int64_t step, const std::vector<std::string>& loss_reasons,
                                                         int64_t may_drop, const AccumulationParts& parts);

// The update of an accumulated step of K micro-batches, after its pass over all of them: when the
// loss is finite (`loss_finite`) `parts.update`; when the loss or then the gradients are not
// finite, the micro-batches at fault left out (update_without_non_finite) if `may_drop` > 0 (the
// most it may leave out; 0: none), otherwise NonfiniteError with the message of `loss_error` or
// `gradient_error` and no update applied. Returns the micro-batches left out.
std::vector<DroppedMicroBatch> update_unless_non_finite(int64_t step, int64_t K, bool loss_finite,
                                                        const std::vector<std::string>& loss_reasons, int64_t may_drop,
                                                        const AccumulationParts& parts,
                                                        const std::function<std::string()>& loss_error,
                                                        const std::function<std::string()>& gradient_error);

}  // namespace bertlab
