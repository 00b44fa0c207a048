#pragma once
// Corpus readers. A corpus is a list of documents, each a list of sentences:
//   text:  Google's create_pretraining_data.py format: one sentence per line, a blank line
//          between documents (a file of such text, or a directory of such files);
//   brown: the Brown corpus (`word/TAG` tokens, one sentence per line, one document per file):
//          tags are dropped and the words detokenised into ordinary text.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "base/enum_table.h"

namespace bertlab::data {

struct Document {
  std::string source;  // "file:line" of the first sentence, for messages
  std::vector<std::string> sentences;
};

#define BERTLAB_CORPUS_FORMATS(X) X(automatic, "auto") X(text, "text") X(brown, "brown")
BERTLAB_ENUM(CorpusFormat, uint8_t, BERTLAB_CORPUS_FORMATS)

// Where fetched corpora live: $BERTLAB_DATA, else $HOME/.cache/bertlab.
std::filesystem::path data_cache_dir();

// "brown" names the fetched Brown corpus (throws, pointing to scripts/fetch_corpus.sh, when
// it is missing); anything else is a path, which must exist.
std::filesystem::path resolve_corpus(const std::string& spec);

// Reads a file or a directory (files in sorted path order, hidden files skipped). Throws
// bertlab::Error naming the file and line for invalid UTF-8, an unreadable path, a file
// without text, or a corpus without documents.
std::vector<Document> read_corpus(const std::filesystem::path& path,
                                  CorpusFormat format = CorpusFormat::automatic);

// One line of Brown `word/TAG` tokens as plain text: ``The/at jury/nn ,/, ''/''`` ->
// `"The jury,"`.
std::string detokenize_brown(std::string_view line);

// Whether a line looks like Brown `word/TAG` tokens (most tokens carry a tag).
bool looks_like_brown(std::string_view line);

}  // namespace bertlab::data
