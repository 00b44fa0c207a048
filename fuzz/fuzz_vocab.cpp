// vocab.txt (first byte 0) or tokenizer_config.json (first byte 1) beside a fixed other file,
// then tokenising a fixed sentence with the result.
#include "fuzz/fuzz_util.h"
#include "data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  // The fixed vocabulary beside a fuzzed tokenizer_config.json: parsed once, copied per input.
  static const data::Vocab fixed_vocab =
      data::Vocab::parse("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nquick\n##ly\nfox\n.\n", "vocab.txt");
  if (size < 1) return 0;
  const std::string_view text = fuzz::as_text(data + 1, size - 1);
  return fuzz::expect_clean([&] {
    data::Vocab vocab;
    data::TokenizerConfig config;
    if (data[0] & 1) {
      config = data::TokenizerConfig::parse(text, "tokenizer_config.json");
      vocab = fixed_vocab;
    } else {
      vocab = data::Vocab::parse(text, "vocab.txt");
    }
    data::BertTokenizer tok(std::move(vocab), std::move(config));
    (void)tok.encode("The quickly fox. Über 中文 [MASK]", std::string_view("second segment"));
  });
}
