#include "runtime/run_loop.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "base/file_util.h"
#include "runtime/checkpoint.h"

namespace bertlab {

namespace fs = std::filesystem;

namespace {

// The lines of `file` up to the last one of `step` (in the order written: after a rollback,
// steps repeat, and the checkpoint of `step` was written after its last line), without a line
// torn by a kill. A log without a line of `step` keeps its lines of steps up to `step`.
std::string lines_through(const fs::path& file, int64_t step) {
  std::vector<std::pair<int64_t, std::string>> lines;
  std::ifstream in(file, std::ios::binary);
  for (std::string line; std::getline(in, line);) {
    if (in.eof()) break;  // no newline: a line cut by a kill
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer())
      lines.emplace_back(j["step"].get<int64_t>(), line);
  }
  size_t end = lines.size();
  while (end > 0 && lines[end - 1].first != step) --end;
  std::string kept;
  for (size_t i = 0; i < lines.size(); ++i)
    if (end > 0 ? i < end : lines[i].first <= step) kept += lines[i].second + "\n";
  return kept;
}

}  // namespace

OnNonfinite on_nonfinite_from_string(const std::string& s, const std::string& what) {
  return enum_from_string<OnNonfinite>(s, what);
}

nlohmann::json LoopState::to_json() const {
  return {{"step", step}, {"data_offset", data_offset}, {"rollbacks", rollbacks}, {"skipped", skipped}};
}

LoopState LoopState::from_trainer_state(const nlohmann::json& state, const std::string& file) {
  LoopState s;
  s.step = state.at("step").get<int64_t>();
  if (!state.contains("loop")) return s;
  const auto& loop = state["loop"];
  auto integer = [&](const char* key) {
    check(loop.is_object() && loop.contains(key) && loop[key].is_number_integer() && loop[key].get<int64_t>() >= 0,
          "{}: field 'loop.{}' is {}, expected a non-negative integer", file, key,
          loop.is_object() && loop.contains(key) ? loop[key].dump().substr(0, 100) : "missing");
    return loop[key].get<int64_t>();
  };
  check(integer("step") == s.step, "{}: field 'loop.step' is {}, field 'step' {}", file, loop["step"].dump(), s.step);
  s.data_offset = integer("data_offset");
  s.rollbacks = integer("rollbacks");
  check(loop.contains("skipped") && loop["skipped"].is_array(), "{}: field 'loop.skipped' is missing or not a list", file);
  for (const auto& v : loop["skipped"]) {
    check(v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= s.step,
          "{}: field 'loop.skipped' holds {}, expected steps from 1 to {}", file, v.dump().substr(0, 100), s.step);
    s.skipped.push_back(v.get<int64_t>());
  }
  return s;
}

NonfiniteInjection nonfinite_injection_from_string(const std::string& s, const std::string& what) {
  auto bad = [&] {
    fail("{} {}: expected STEP[:MICRO[:loss|grad]] (STEP from 1, MICRO from 0; e.g. 5, 5:1 or 5:1:grad)", what, s);
  };
  std::vector<std::string> parts;
  for (size_t from = 0;;) {
    const size_t colon = s.find(':', from);
    parts.push_back(s.substr(from, colon == std::string::npos ? std::string::npos : colon - from));
    if (colon == std::string::npos) break;
    from = colon + 1;
  }
  if (parts.size() > 3) bad();
  auto integer = [&](const std::string& t, int64_t min) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || end != t.data() + t.size() || v < min) bad();
    return v;
  };
  NonfiniteInjection in;
  in.data_step = integer(parts[0], 1);
  if (parts.size() > 1) in.micro = integer(parts[1], 0);
  if (parts.size() > 2) {
    const auto kind = enum_parse<NonfiniteKind>(parts[2]);
    if (!kind) bad();
    in.kind = *kind;
  }
  return in;
}

const NonfiniteInjection* MicroBatchPolicy::injected(int64_t k) const {
  for (const auto& in : inject)
    if (in.micro == k || in.micro == NonfiniteInjection::kEveryMicroBatch) return &in;
  return nullptr;
}

void check_loop_options(const LoopOptions& o) {
  check(o.nonfinite.action != OnNonfinite::rollback || o.save_steps > 0,
        "--on-nonfinite rollback needs checkpoints to go back to: give --save-steps N > 0 (checkpoints are off)");
  check(o.nonfinite.limit >= 1, "--nonfinite-limit {}: expected at least 1", o.nonfinite.limit);
  check(o.nonfinite.window >= 1, "--nonfinite-window {}: expected at least 1 step", o.nonfinite.window);
  for (const auto& in : o.nonfinite.inject)
    check(in.micro < o.accum_steps, "--debug-nonfinite-batch {}:{}: a step has micro-batches 0 to {} (--accum-steps {})",
          in.data_step, in.micro, o.accum_steps - 1, o.accum_steps);
}

std::string loop_event_text(const LoopEvent& e, const fs::path& out) {
  switch (e.kind) {
    case LoopEvent::checkpoint: return fmt::format("saved {}", e.path);
    case LoopEvent::skipped: return fmt::format("{}: its update skipped (--on-nonfinite skip)", e.reason);
    case LoopEvent::dropped: return fmt::format("{}: left out of the step's update (--on-nonfinite skip)", e.reason);
    case LoopEvent::rolled_back:
      return fmt::format("{}: rolled back to {}, past the data that led there (--on-nonfinite rollback)", e.reason,
                         e.path);
    case LoopEvent::interrupted:
      return fmt::format("stopped by signal after step {}; resume with --resume {}/checkpoint-{}", e.step,
                         out.string(), e.step);
  }
  return "";
}

DirLock claim_output_dir(const fs::path& out, bool overwrite, bool resuming) {
  std::error_code ec;
  check(!fs::exists(out, ec) || fs::is_directory(out, ec), "--out {} is not a directory", out.string());
  DirLock lock(out);
  if (!overwrite && !resuming)
    for (const auto& e : fs::directory_iterator(out))
      check(e.path().filename() == kLockFile, "output directory {} exists (use --overwrite to replace it, or --resume a checkpoint)",
            out.string());
  return lock;
}

MetricsLog::MetricsLog(const fs::path& out, int64_t resumed_step) : path_(out / "metrics.jsonl") {
  std::error_code ec;
  if (resumed_step > 0 && fs::is_regular_file(path_, ec)) write_file_atomic(path_, lines_through(path_, resumed_step));
  file_.open(path_, resumed_step > 0 ? std::ios::app : std::ios::trunc);
  check(file_.good(), "cannot write {}", path_.string());
}

void MetricsLog::write(const nlohmann::json& line) {
  if (!file_.is_open()) return;
  file_ << line.dump() << "\n" << std::flush;
  check(file_.good(), "cannot write {}", path_.string());
}

namespace {

class Loop {
 public:
  Loop(const LoopOptions& o, const LoopHooks& hooks, MetricsLog& log) : o_(o), hooks_(hooks), log_(log) {}

  void checkpoint(const LoopState& state) {
    if (!o_.writer) return;
    const fs::path dir = o_.out / fmt::format("checkpoint-{}", state.step);
    hooks_.save(dir, state);
    auto all = checkpoints_in(o_.out);
    for (size_t i = 0; o_.save_total_limit > 0 && i + o_.save_total_limit < all.size(); ++i) fs::remove_all(all[i]);
    hooks_.on_event({LoopEvent::checkpoint, state.step, dir.string(), ""});
  }

  // Micro-batches that step `step` may leave out of its update: the rest of --nonfinite-limit
  // in the window that ends with it (skip), or none.
  int64_t drop_allowance(LoopState& state, int64_t step) const {
    if (o_.nonfinite.action != OnNonfinite::skip) return 0;
    const int64_t since = step - o_.nonfinite.window;
    std::erase_if(state.skipped, [&](int64_t s) { return s <= since; });
    return std::max<int64_t>(0, o_.nonfinite.limit - static_cast<int64_t>(state.skipped.size()));
  }

  // Micro-batches that step `step` left out of its update: counted in the window and logged.
  void record_dropped(LoopState& state, int64_t step, const std::vector<DroppedMicroBatch>& dropped) {
    check(static_cast<int64_t>(dropped.size()) <= drop_allowance(state, step),
          "step {}: {} micro-batch(es) left out, more than --nonfinite-limit allows", step, dropped.size());
    for (const auto& d : dropped) {
      state.skipped.push_back(step);
      log_.write({{"step", step}, {"event", "skip"}, {"micro_batch", d.micro}, {"step_skipped", false},
                  {"reason", d.reason}, {"dropped_in_window", state.skipped.size()}});
      hooks_.on_event({LoopEvent::dropped, step, "", d.reason, d.micro});
    }
  }

  // A step that was not finite: true when the run goes on (state updated), false to rethrow.
  bool recover(LoopState& state, int64_t step, const NonfiniteError& e) {
    switch (o_.nonfinite.action) {
      case OnNonfinite::stop: return false;
      case OnNonfinite::skip: return skip(state, step, e);
      case OnNonfinite::rollback: return rollback(state, step, e);
    }
    return false;
  }

 private:
  // The whole step's update dropped: every micro-batch at fault counts in the window (all of the
  // step's when the step could not tell which), one log line each.
  bool skip(LoopState& state, int64_t step, const NonfiniteError& e) {
    std::vector<DroppedMicroBatch> at_fault = e.at_fault;
    if (at_fault.empty()) at_fault.push_back({0, e.what()});
    const int64_t allowed = drop_allowance(state, step), needed = static_cast<int64_t>(at_fault.size());
    check(needed <= allowed,
          "{}; leaving out {} more micro-batch(es) would exceed --nonfinite-limit {}: {} already left out in the last "
          "{} steps (--nonfinite-window {}; a step skipped whole counts each of its micro-batches)",
          e.what(), needed, o_.nonfinite.limit, state.skipped.size(), o_.nonfinite.window, o_.nonfinite.window);
    for (const auto& d : at_fault) {
      state.skipped.push_back(step);
      log_.write({{"step", step}, {"event", "skip"}, {"micro_batch", d.micro}, {"step_skipped", true},
                  {"reason", d.reason}, {"dropped_in_window", state.skipped.size()}});
    }
    state.step = step;
    hooks_.on_event({LoopEvent::skipped, step, "", e.what()});
    return true;
  }

  bool rollback(LoopState& state, int64_t step, const NonfiniteError& e) {
    check(state.rollbacks < o_.nonfinite.limit, "{}; already rolled back {} time(s) (--nonfinite-limit {})", e.what(),
          state.rollbacks, o_.nonfinite.limit);
    const fs::path dir = newest_valid_checkpoint(o_.out);
    check(!dir.empty(), "{}; no complete checkpoint in {} to roll back to", e.what(), o_.out.string());
    LoopState back = hooks_.restore(dir);
    check(back.step < step, "{}; the newest checkpoint {} is not before the step", e.what(), dir.string());
    // The data of the steps since the checkpoint led to the spike: the next steps read past it.
    const int64_t first = back.step + 1 + state.data_offset, last = step + state.data_offset;
    back.data_offset = state.data_offset + (step - back.step);
    back.rollbacks = state.rollbacks + 1;
    log_.write({{"step", step}, {"event", "rollback"}, {"reason", e.what()}, {"to_step", back.step},
                {"skipped_data_steps", {first, last}}, {"rollbacks", back.rollbacks}});
    hooks_.on_event({LoopEvent::rolled_back, step, dir.string(), e.what()});
    state = back;
    return true;
  }

  const LoopOptions& o_;
  const LoopHooks& hooks_;
  MetricsLog& log_;
};

}  // namespace

LoopState run_loop(const LoopOptions& o, LoopState state, const LoopHooks& hooks, MetricsLog& log) {
  check_loop_options(o);
  Loop loop(o, hooks, log);
  if (o.nonfinite.action == OnNonfinite::rollback && state.step == 0) loop.checkpoint(state);
  while (state.step < o.max_steps) {
    const int64_t step = state.step + 1, data_step = step + state.data_offset;
    try {
      MicroBatchPolicy policy{loop.drop_allowance(state, step), {}};
      for (const auto& in : o.nonfinite.inject)
        if (in.data_step == data_step) policy.inject.push_back(in);
      const std::vector<DroppedMicroBatch> dropped = hooks.step(step, data_step, policy);
      state.step = step;
      loop.record_dropped(state, step, dropped);
    } catch (const NonfiniteError& e) {
      if (!loop.recover(state, step, e)) throw;
      if (state.step != step) continue;  // rolled back: on from the checkpoint
    }
    if ((o.eval_steps > 0 && step % o.eval_steps == 0) || step == o.max_steps) hooks.evaluate(step);
    const bool stopping = hooks.stop_requested && hooks.stop_requested();
    if ((o.save_steps > 0 && step % o.save_steps == 0) || stopping || (step == o.max_steps && o.checkpoint_at_end))
      loop.checkpoint(state);
    if (stopping) {
      hooks.on_event({LoopEvent::interrupted, step, "", ""});
      break;
    }
  }
  return state;
}

}  // namespace bertlab
