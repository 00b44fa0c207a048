#pragma once
// Fine-tuning test inputs shared by test_finetune.cpp and test_finetune_resume.cpp: the tiny
// model directory, and small learnable sequence- and token-classification files.
#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace bertlab::testing {

inline std::filesystem::path tiny_fixture() { return std::filesystem::path(BERTLAB_SOURCE_DIR) / "tests/reference/tiny_bert"; }

// A model directory from the tiny fixture with the small test vocabulary.
inline std::filesystem::path tiny_model_dir(const TempDir& d) {
  auto dir = d / "model";
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) std::filesystem::copy_file(tiny_fixture() / f, dir / f);
  std::filesystem::copy_file(std::filesystem::path(BERTLAB_SOURCE_DIR) / "tests/data/vocab_small/vocab.txt", dir / "vocab.txt");
  return dir;
}

inline void write_text(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

// Sentences over the small vocabulary; the label says whether "dog" occurs (learnable).
inline std::string seq_csv(int n, uint32_t seed, bool long_one) {
  const std::vector<std::string> words{"the", "quick", "brown", "fox", "jumps", "over", "lazy", "hello", "world", "cafe"};
  std::mt19937 rng(seed);
  std::string out = "text,label\n";
  for (int i = 0; i < n; ++i) {
    std::string s;
    const bool dog = i % 2 == 0;
    const int len = 3 + static_cast<int>(rng() % 5), at = static_cast<int>(rng() % len);
    for (int k = 0; k < len; ++k) s += (k ? " " : "") + (dog && k == at ? std::string("dog") : words[rng() % words.size()]);
    if (long_one && i == 0) for (int k = 0; k < 50; ++k) s += " world";
    out += fmt::format("\"{}\",{}\n", s, dog ? "dog" : "no-dog");
  }
  return out;
}

// Sentences where "the" is DT, "dog"/"fox" NN, "jumps" VB, "unaffable" JJ.
inline std::string conll(int n, uint32_t seed) {
  const std::vector<std::pair<std::string, std::string>> words{{"the", "DT"}, {"dog", "NN"}, {"fox", "NN"},
                                                               {"jumps", "VB"}, {"unaffable", "JJ"}};
  std::mt19937 rng(seed);
  std::string out;
  for (int i = 0; i < n; ++i) {
    const int len = 2 + static_cast<int>(rng() % 5);
    for (int k = 0; k < len; ++k) {
      const auto& [w, t] = words[rng() % words.size()];
      out += w + "\t" + t + "\n";
    }
    out += "\n";
  }
  return out;
}

}  // namespace bertlab::testing
