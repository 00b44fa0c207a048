// vocab.txt (first byte 0) or tokenizer_config.json (first byte 1) beside a fixed other file,
// then tokenising a fixed sentence with the result.
#include "fuzz/fuzz_util.h"
#include "runtime/data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  if (size < 1) return 0;
  const auto dir = fuzz::scratch_dir() / "vocab";
  std::filesystem::create_directories(dir);
  const bool config = data[0] & 1;
  std::filesystem::remove(dir / "tokenizer_config.json");
  if (config) {
    fuzz::write_input("vocab/tokenizer_config.json", data + 1, size - 1);
    static const std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nquick\n##ly\nfox\n.\n";
    fuzz::write_input("vocab/vocab.txt", reinterpret_cast<const uint8_t*>(vocab.data()), vocab.size());
  } else {
    fuzz::write_input("vocab/vocab.txt", data + 1, size - 1);
  }
  return fuzz::expect_clean([&] {
    auto tok = data::BertTokenizer::load(dir);
    (void)tok.encode("The quickly fox. Über 中文 [MASK]", std::string_view("second segment"));
  });
}
