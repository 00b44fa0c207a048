#pragma once
// Helpers shared by `bertlab calibrate` and `bertlab profile`.
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/model.h"

namespace bertlab::app {

// Fails now, before minutes of measuring, if `path` cannot be written ("-" is standard output).
inline void check_output_writable(const std::string& path, const char* option) {
  if (path.empty() || path == "-") return;
  std::filesystem::path probe = path;
  probe += fmt::format(".probe{}", ::getpid());
  {
    std::ofstream out(probe);
    check(out.good(), "{} {}: cannot write there (directory missing or not writable)", option, path);
  }
  std::filesystem::remove(probe);
}

// Random in-vocabulary ids, two segments, no padding: the timing does not depend on values.
inline BertInputs synthetic_inputs(const BertConfig& c, int64_t batch, int64_t seq) {
  BertInputs in;
  in.batch = batch;
  in.seq = seq;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.vocab_size - 1));
  for (int64_t i = 0; i < batch * seq; ++i) {
    in.input_ids.push_back(id(rng));
    in.token_type_ids.push_back(i % seq >= seq / 2 ? 1 : 0);
    in.attention_mask.push_back(1);
  }
  return in;
}

}  // namespace bertlab::app
