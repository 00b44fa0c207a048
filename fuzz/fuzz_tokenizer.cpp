// Tokenizer input text: arbitrary bytes, as `bertlab tokenize` gets them on standard input
// (which refuses invalid UTF-8 first), single segments and pairs with truncation.
#include "fuzz/fuzz_util.h"
#include "data/tokenizer.h"
#include "data/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  static const auto tok = data::BertTokenizer::load(std::filesystem::path(BERTLAB_SOURCE_DIR) / "tests/data/vocab_small");
  const std::string_view text = fuzz::as_text(data, size);
  if (data::find_invalid_utf8(text) != std::string::npos) return 0;
  return fuzz::expect_clean([&] {
    (void)tok.tokenize(text);
    data::EncodeOptions o;
    o.add_special_tokens = true;
    o.truncation = true;
    o.max_length = 16;
    const auto tab = text.find('\t');
    if (tab != std::string_view::npos)
      (void)tok.encode(text.substr(0, tab), text.substr(tab + 1), o);
    else
      (void)tok.encode(text, std::nullopt, o);
  });
}
