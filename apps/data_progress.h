#pragma once
// Progress lines on standard error for the data subcommands (tokenize, vocab, prepare), and
// the TBB thread limit they share. Header-only: used by cmd_vocab.cpp and cmd_prepare.cpp.
#include <fmt/core.h>
#include <tbb/global_control.h>

#include <chrono>
#include <memory>
#include <string>

#include "apps/common.h"
#include "data/pretraining.h"
#include "base/error.h"

namespace bertlab::app {

// Prints "<command>: <stage> <done>/<total>" at most every 10% of a stage (and its end).
inline data::Progress stderr_progress(std::string command) {
  struct State {
    std::string stage;
    std::size_t last_tenth = 0;
  };
  auto state = std::make_shared<State>();
  return [command = std::move(command), state](std::string_view stage, std::size_t done, std::size_t total) {
    std::size_t tenth = total ? done * 10 / total : 10;
    if (stage != state->stage) {
      state->stage = std::string(stage);
      state->last_tenth = 0;
    } else if (tenth == state->last_tenth && done != total) {
      return;
    }
    state->last_tenth = tenth;
    fmt::print(stderr, "{}: {} {}/{}\n", command, stage, done, total);
  };
}

// Limits TBB (the data pipeline's parallelism) to `threads` workers; 0 keeps the default.
inline std::unique_ptr<tbb::global_control> limit_data_threads(int threads) {
  check(threads <= kMaxThreads, "--threads {} is more than the {} bertlab supports", threads, kMaxThreads);
  if (threads <= 0) return nullptr;
  return std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                               static_cast<std::size_t>(threads));
}

}  // namespace bertlab::app
