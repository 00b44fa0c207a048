// Fine-tuning data (`bertlab finetune`): the first byte picks the format (CSV, TSV, JSON lines or
// CoNLL) and whether labels are required; the rest is the file. What reads cleanly is then
// labelled and encoded as fine-tuning does (label set, truncation, word-label alignment).
#include "fuzz/fuzz_util.h"
#include "data/task_data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  using namespace bertlab::data;
  static const auto tok = BertTokenizer::load(std::filesystem::path(BERTLAB_SOURCE_DIR) / "tests/data/vocab_small");
  if (size < 1) return 0;
  const std::string_view text = fuzz::as_text(data + 1, size - 1);
  const bool labelled = data[0] & 4;
  return fuzz::expect_clean([&] {
    switch (data[0] & 3) {
      case 0:
      case 1:
      case 2: {
        const TableFormat format = (data[0] & 3) == 0 ? TableFormat::csv : (data[0] & 3) == 1 ? TableFormat::tsv
                                                                                            : TableFormat::jsonl;
        const auto examples = parse_text_examples(text, format, "task.data", labelled);
        const LabelSet labels = LabelSet::from_examples(examples);
        for (const auto& ex : examples)
          (void)encode_text(tok, ex, labelled ? labels.id(ex.label, ex.source) : -100, 32);
        break;
      }
      case 3: {
        const auto sentences = parse_conll(text, "task.conll", labelled);
        const LabelSet labels = LabelSet::from_sentences(sentences);
        for (const auto& s : sentences) {
          std::vector<int32_t> tags;
          for (const auto& t : s.tags) tags.push_back(labels.id(t, s.source));
          (void)encode_words(tok, s.words, tags, 32);
        }
        break;
      }
    }
  });
}
