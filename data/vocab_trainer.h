#pragma once
// WordPiece vocabulary training the way Hugging Face's BertWordPieceTokenizer trains it:
// pre-tokenise with BasicTokenizer, start from the characters (first character of a word as
// is, later ones as "##c"), then repeatedly merge the most frequent adjacent pair of pieces
// until the vocabulary is full or no pair occurs min_frequency times. Ties go to the pair of
// earlier pieces, so the result is deterministic for a given corpus (and thread count).
// Output order: [PAD] [UNK] [CLS] [SEP] [MASK], the alphabet, then merged pieces.
#include <cstdint>

#include "data/corpus.h"
#include "data/pretraining.h"
#include "data/tokenizer.h"
#include "data/vocab.h"

namespace bertlab::data {

struct VocabTrainerOptions {
  std::size_t vocab_size = 30522;
  std::size_t min_frequency = 2;     // a pair must occur this often to be merged
  std::size_t limit_alphabet = 1000; // keep only the most frequent characters
  TokenizerConfig config;            // pre-tokenisation settings, written beside the vocab
};

Vocab train_wordpiece_vocab(const std::vector<Document>& docs, const VocabTrainerOptions& options,
                            const Progress& progress = {});

// Writes DIR/vocab.txt and DIR/tokenizer_config.json (each atomically).
void save_vocab_dir(const std::filesystem::path& dir, const Vocab& vocab, const TokenizerConfig& config);

struct VocabReport {
  std::size_t words = 0;        // BasicTokenizer words (punctuation marks count as words)
  std::size_t text_words = 0;   // whitespace-separated words of the text
  std::size_t tokens = 0, unknown = 0;
  double unk_rate() const { return tokens ? static_cast<double>(unknown) / static_cast<double>(tokens) : 0; }
  double tokens_per_word() const { return words ? static_cast<double>(tokens) / static_cast<double>(words) : 0; }
  double tokens_per_text_word() const {
    return text_words ? static_cast<double>(tokens) / static_cast<double>(text_words) : 0;
  }
};

// [UNK] rate and pieces per word of `docs` (e.g. held-out documents).
VocabReport evaluate_vocab(const BertTokenizer& tokenizer, const std::vector<Document>& docs);

}  // namespace bertlab::data
