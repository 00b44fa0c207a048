#include "runtime/run_setup.h"

#include "base/error.h"
#include "base/file_util.h"
#include "base/json_file.h"
#include "runtime/checkpoint.h"

namespace bertlab {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStateFormat = "bertlab-trainer-state";
constexpr int kStateVersion = 1;

}  // namespace

nlohmann::json trainer_state_header(RunKind kind) {
  return {{"format", kStateFormat}, {"version", kStateVersion}, {"kind", to_string(kind)}};
}

void copy_tokenizer(const fs::path& from, const fs::path& to) {
  for (const char* f : {"vocab.txt", "tokenizer_config.json"})
    if (!from.empty() && fs::exists(from / f)) fs::copy_file(from / f, to / f, fs::copy_options::overwrite_existing);
}

void save_checkpoint(const fs::path& dir, const Model& m, const TrainingState& s,
                     const nlohmann::json& trainer_state, const fs::path& vocab_dir,
                     const std::function<void(const fs::path&)>& extra) {
  // Built under a hidden name, the manifest written last, then renamed into place: a
  // checkpoint-N directory is complete or absent. On any failure (a full disk) the partial
  // directory is removed and the checkpoints already there are left as they were.
  const fs::path tmp = dir.parent_path() / fmt::format(".{}.tmp", dir.filename().string());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  try {
    save_model_dir(tmp, m.config, m.params);
    copy_tokenizer(vocab_dir, tmp);
    std::vector<SafetensorWrite> moments;
    for (const auto& p : s.exp_avg.params()) {
      moments.push_back({"exp_avg:" + p.name, "F32", p.shape, s.exp_avg.data(p.name)});
      moments.push_back({"exp_avg_sq:" + p.name, "F32", p.shape, s.exp_avg_sq.data(p.name)});
    }
    write_safetensors(tmp / "optimizer.safetensors", moments, {{"format", "bertlab-optimizer"}});
    write_file_atomic(tmp / "trainer_state.json", trainer_state.dump(2) + "\n");
    if (extra) extra(tmp);
    write_manifest(tmp);
    fs::remove_all(dir);
    fs::rename(tmp, dir);
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    fail("cannot save checkpoint {}: {}", dir.string(), e.what());
  }
}

nlohmann::json read_trainer_state(const fs::path& path) {
  return check_trainer_state(read_json_file(path, "trainer state"), path.string());
}

nlohmann::json check_trainer_state(nlohmann::json state, const std::string& file) {
  check(state.is_object() && state.contains("format") && state["format"] == kStateFormat && state.contains("version") &&
            state["version"] == kStateVersion,
        "{}: not a bertlab trainer state of version {}", file, kStateVersion);
  check(state.contains("step") && state["step"].is_number_integer() && state["step"].get<int64_t>() >= 0,
        "{}: field 'step' is {}, expected a non-negative integer", file,
        state.contains("step") ? state["step"].dump().substr(0, 100) : "missing");
  return state;
}

nlohmann::json read_checkpoint_state(const fs::path& dir, RunKind expected) {
  verify_manifest(dir);
  const fs::path file = dir / "trainer_state.json";
  nlohmann::json state = read_trainer_state(file);
  // Checkpoints from before fine-tuning had them are pretraining ones, without the field.
  const nlohmann::json kind = state.value("kind", nlohmann::json(to_string(RunKind::pretraining)));
  check(kind == to_string(expected),
        "cannot resume from {}: it is a {} checkpoint ({}: field 'kind' is {}), expected a {} checkpoint "
        "(`bertlab train` resumes pretraining checkpoints, `bertlab finetune` fine-tuning ones)",
        dir.string(), kind.is_string() ? kind.get<std::string>() : kind.dump(), file.string(),
        state.contains("kind") ? kind.dump() : "absent", to_string(expected));
  return state;
}

void check_resume_settings(const nlohmann::json& saved, const nlohmann::json& now,
                           std::initializer_list<const char*> keys, const fs::path& dir) {
  const std::string file = (dir / "trainer_state.json").string();
  for (const char* key : keys) {
    check(saved.contains(key), "{}: field '{}' is missing", file, key);
    check(saved.at(key) == now.at(key), "cannot resume {} exactly: {} was {} there, {} now ({})", dir.string(), key,
          saved.at(key).dump().substr(0, 200), now.at(key).dump().substr(0, 200), file);
  }
}

void check_same_model(const BertConfig& checkpoint, const BertConfig& here, const fs::path& dir, bool ignore_vocab) {
  const auto a = config_to_json(checkpoint), b = config_to_json(here);
  for (auto it = b.begin(); it != b.end(); ++it)
    check((ignore_vocab && it.key() == "vocab_size") || a.at(it.key()) == it.value(),
          "checkpoint {} holds a model of another shape: {} is {} there, {} here", dir.string(),
          it.key(), a.at(it.key()).dump(), it.value().dump());
}

void load_checkpoint_weights(const fs::path& dir, Model& m, TrainingState& s) {
  check_same_model(load_config(dir / "config.json"), m.config, dir, false);
  load_hf_weights(m.params, SafetensorsFile(dir / "model.safetensors"));
  SafetensorsFile opt(dir / "optimizer.safetensors");
  for (const auto& p : s.exp_avg.params()) {
    opt.read_f32("exp_avg:" + p.name, p.shape, s.exp_avg.data(p.name));
    opt.read_f32("exp_avg_sq:" + p.name, p.shape, s.exp_avg_sq.data(p.name));
  }
}

RunSetup::RunSetup(RunKind kind, LoopOptions loop_options, const fs::path& resume, bool overwrite)
    : loop(std::move(loop_options)), kind_(kind) {
  check_loop_options(loop);
  // One writer per output directory, for the whole run; then the checkpoint, verified.
  if (loop.writer) lock_ = claim_output_dir(loop.out, overwrite, !resume.empty());
  resume_ = resume_dir(resume, loop.out);
  if (resuming()) saved_ = read_checkpoint_state(resume_, kind_);
}

void RunSetup::check_resume(const nlohmann::json& now, std::initializer_list<const char*> keys) const {
  check_resume_settings(saved_, now, keys, resume_);
}

namespace {

LoopState loaded(const fs::path& dir, const nlohmann::json& state, const RunSetup::Load& load) {
  load(dir, state);
  return LoopState::from_trainer_state(state, (dir / "trainer_state.json").string());
}

}  // namespace

LoopState RunSetup::start(const Load& load) const { return resuming() ? loaded(resume_, saved_, load) : LoopState{}; }

LoopState RunSetup::restore(const fs::path& dir, const Load& load) const {
  return loaded(dir, read_checkpoint_state(dir, kind_), load);
}

nlohmann::json RunSetup::checkpoint_state(nlohmann::json run_state, const LoopState& at) {
  run_state["step"] = at.step;
  run_state["loop"] = at.to_json();
  return run_state;
}

MetricsLog& RunSetup::open_metrics(int64_t resumed_step) {
  if (loop.writer) metrics_ = MetricsLog(loop.out, resumed_step);
  return metrics_;
}

LoopState RunSetup::run(const LoopState& start, const LoopHooks& hooks) { return run_loop(loop, start, hooks, metrics_); }

}  // namespace bertlab
