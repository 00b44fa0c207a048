// A main for one harness's LLVMFuzzerTestOneInput without libFuzzer or sanitizers, to see where
// an execution's time goes in the product code itself (perf, or the CPU time it prints): it runs
// every file given (directories: every file in them) REPS times (environment, default 100) and
// prints the CPU microseconds per input. Not part of the CMake build; with the Release build:
//   g++ -O2 -g -std=c++20 -DNDEBUG -DFMT_SHARED -I. -DBERTLAB_SOURCE_DIR="\"$PWD\"" \
//     fuzz/fuzz_tokenizer.cpp fuzz/replay_main.cpp build/runtime/libbertlab_data.a \
//     build/base/libbertlab_base.a -lutf8proc -ltbb -lcsv -lfmt -o build/replay_tokenizer
//   REPS=300 build/replay_tokenizer build-fuzz/seeds/tokenizer
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "base/file_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const char* reps_env = std::getenv("REPS");
  const int reps = reps_env ? std::atoi(reps_env) : 100;
  std::vector<std::string> inputs;
  std::size_t bytes = 0;
  for (int i = 1; i < argc; ++i) {
    std::vector<fs::path> files;
    if (fs::is_directory(argv[i]))
      for (const auto& e : fs::directory_iterator(argv[i])) files.push_back(e.path());
    else
      files.emplace_back(argv[i]);
    for (const auto& f : files) {
      inputs.push_back(read_file(f));
      bytes += inputs.back().size();
    }
  }
  if (inputs.empty() || reps < 1) {
    std::fprintf(stderr, "usage: REPS=N %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  const std::clock_t start = std::clock();
  for (int r = 0; r < reps; ++r)
    for (const auto& s : inputs) LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  const double seconds = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  std::printf("%zu inputs (%zu bytes), %d times: %.1f CPU us per input\n", inputs.size(), bytes, reps,
              1e6 * seconds / (static_cast<double>(reps) * static_cast<double>(inputs.size())));
}
