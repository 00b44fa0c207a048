// The metadata of prepared data (meta.json) beside a valid vocabulary and shard, opened as
// training and evaluation do (FUZZ_DATA_DIR: a prepared directory, see scripts/fuzz_seeds.sh).
#include <cstdlib>

#include "fuzz/fuzz_util.h"
#include "data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  namespace fs = std::filesystem;
  static const fs::path dir = [] {
    const char* from = std::getenv("FUZZ_DATA_DIR");
    const fs::path d = fuzz::scratch_dir() / "data";
    fs::create_directories(d);
    if (from)
      for (const auto& e : fs::directory_iterator(from))
        if (e.path().filename() != "meta.json") fs::copy_file(e.path(), d / e.path().filename(), fs::copy_options::overwrite_existing);
    return d;
  }();
  return fuzz::expect_clean([&] {
    for (const char* split : {"train", "eval"}) {
      data::PretrainingDataset ds(dir, fuzz::as_text(data, size), split, {true, 1});
      if (ds.size() > 0) {
        data::Batch b;
        const size_t index[1] = {0};
        ds.fill_batch(index, 0, b);
      }
    }
  });
}
