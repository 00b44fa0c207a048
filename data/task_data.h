#pragma once
// Labelled data for fine-tuning, in the formats users already have:
//   - CSV (RFC 4180, via libcsv), TSV (tab-separated, no quoting, as GLUE's .tsv files) or JSON
//     lines, with a header / keys naming `text[, text_pair], label` (GLUE style);
//   - CoNLL-style token files: `word<TAB>tag` per line, a blank line between sentences.
// And their encoding for BERT: labels as ids of a label set read from the training file, and
// Hugging Face's token-label alignment (first sub-word of each word carries the label, the
// other sub-words and the special tokens -100).
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/enum_table.h"
#include "data/tokenizer.h"

namespace bertlab::data {

// The fine-tuning tasks, with their spelling in `finetune --task`.
#define BERTLAB_TASK_KINDS(X) X(sequence_classification, "seq-cls") X(token_classification, "token-cls")
BERTLAB_ENUM(TaskKind, uint8_t, BERTLAB_TASK_KINDS)

// One text (or text pair) with its label; `source` is "file:line" for messages.
struct TextExample {
  std::string text, text_pair;
  bool has_pair = false;
  std::string label;  // empty when the file has no label column (prediction input)
  std::string source;
};

// One sentence of a CoNLL file.
struct TaggedSentence {
  std::vector<std::string> words, tags;  // tags empty for prediction input without tags
  std::string source;
};

enum class TableFormat { csv, tsv, jsonl };

// From the extension: .csv, .tsv, .jsonl/.json; anything else is an error naming the file.
TableFormat table_format_for(const std::filesystem::path& file);

// Reads a CSV/TSV/JSON-lines file. The text columns are `text` and `text_pair` when present,
// else `sentence1`/`sentence2`, else (as run_glue.py) the first one or two columns other than
// `label`, `idx` and `id`. Errors name the file, line and field: a missing label column (when
// `require_labels`), a line with too many or too few fields, invalid CSV quoting or JSON, an
// empty label, a file without examples.
std::vector<TextExample> read_text_examples(const std::filesystem::path& file, bool require_labels);
// The same from the text of such a file held in memory; `file` names it in errors.
std::vector<TextExample> parse_text_examples(std::string_view text, TableFormat format,
                                             const std::filesystem::path& file, bool require_labels);

// Reads a CoNLL file: `word<TAB>tag` per line (with `require_labels` false, a line may also be
// just `word`), blank lines between sentences, `-DOCSTART-` lines skipped. A line without a
// tab, with more than two fields, or an empty word or tag is an error naming file and line.
std::vector<TaggedSentence> read_conll(const std::filesystem::path& file, bool require_labels);
// The same from the text of such a file held in memory; `file` names it in errors.
std::vector<TaggedSentence> parse_conll(std::string_view text, const std::filesystem::path& file,
                                        bool require_labels);

// The labels of a task: read from the training data, sorted (as run_glue.py / run_ner.py do).
class LabelSet {
 public:
  LabelSet() = default;
  explicit LabelSet(std::vector<std::string> names);  // kept in the given order
  static LabelSet from_examples(const std::vector<TextExample>& ex);
  static LabelSet from_sentences(const std::vector<TaggedSentence>& s);
  // Throws naming `source` and the label when it is not in the set.
  int32_t id(const std::string& label, const std::string& source) const;
  const std::string& name(int32_t id) const { return names_.at(static_cast<size_t>(id)); }
  const std::vector<std::string>& names() const { return names_; }
  int64_t size() const { return static_cast<int64_t>(names_.size()); }

 private:
  std::vector<std::string> names_;
  std::map<std::string, int32_t> ids_;
};

// One encoded example: [CLS] A [SEP] (B [SEP]) without padding, and its labels: one id for
// sequence classification, one per token (-100 where ignored) for token classification.
struct EncodedExample {
  std::vector<int32_t> ids, type_ids, labels;
  std::vector<int32_t> word_of_token;  // token classification: word index per token, -1 if none
  bool truncated = false;
};

// `label` -100 when unknown (prediction). Truncates to max_length (longest first, as HF's
// truncation=True).
EncodedExample encode_text(const BertTokenizer& tok, const TextExample& ex, int32_t label,
                           size_t max_length);
// Hugging Face's alignment (is_split_into_words, label_all_tokens=False): every word is
// tokenized on its own; its first token carries tag_ids[w], the rest -100; [CLS]/[SEP] -100.
// Tokens beyond max_length - 2 are cut (the words they belong to lose their labels).
EncodedExample encode_words(const BertTokenizer& tok, const std::vector<std::string>& words,
                            const std::vector<int32_t>& tag_ids, size_t max_length);

}  // namespace bertlab::data
