// bertlab tokenize: WordPiece-tokenise lines of standard input, one JSON array per line.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "runtime/data/tokenizer.h"
#include "runtime/data/utf8.h"
#include "base/error.h"
#include <fmt/core.h>

namespace bertlab::app {

namespace {
struct TokenizeOptions {
  std::string vocab;
  bool ids = false, pair = false, special = false, bench = false;
  std::size_t max_length = 0;
};

// --bench: tokenise all of standard input in memory and report throughput, writing no tokens.
void run_benchmark(const data::BertTokenizer& tok) {
  std::vector<std::string> lines;
  std::string line;
  std::size_t words = 0, bytes = 0;
  while (std::getline(std::cin, line)) {
    auto bad = data::find_invalid_utf8(line);
    check(bad == std::string::npos, "standard input:{}: invalid UTF-8 at column {}", lines.size() + 1, bad + 1);
    bool in_word = false;
    for (char c : line) {
      bool space = c == ' ' || c == '\t' || c == '\r';
      words += !space && !in_word;
      in_word = !space;
    }
    bytes += line.size();
    lines.push_back(std::move(line));
  }
  std::vector<data::Piece> pieces;
  std::size_t tokens = 0;
  auto start = std::chrono::steady_clock::now();
  for (const auto& l : lines) {
    pieces.clear();
    tok.tokenize(l, pieces);
    tokens += pieces.size();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("tokenize: {} lines, {} words, {} tokens in {:.3f} s: {:.0f} words/s, {:.1f} MB/s (1 thread)\n",
             lines.size(), words, tokens, seconds, static_cast<double>(words) / seconds,
             static_cast<double>(bytes) / seconds / 1e6);
}

void run_tokenize(const TokenizeOptions& o) {
  auto tok = data::BertTokenizer::load(o.vocab);
  if (o.bench) return run_benchmark(tok);
  data::EncodeOptions enc;
  enc.add_special_tokens = o.special;
  if (o.max_length > 0) {
    enc.truncation = true;
    enc.max_length = o.max_length;
  }
  std::string line, out;
  std::size_t number = 0;
  while (std::getline(std::cin, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto bad = data::find_invalid_utf8(line);
    check(bad == std::string::npos, "standard input:{}: invalid UTF-8 at column {}", number, bad + 1);
    std::string_view a = line;
    std::optional<std::string_view> b;
    if (o.pair) {
      auto tab = line.find('\t');
      check(tab != std::string::npos, "standard input:{}: expected two segments separated by a tab", number);
      a = std::string_view(line).substr(0, tab);
      b = std::string_view(line).substr(tab + 1);
    }
    auto e = tok.encode(a, b, enc);
    nlohmann::json arr = nlohmann::json::array();
    for (auto id : e.ids) {
      if (o.ids)
        arr.push_back(id);
      else
        arr.push_back(tok.vocab().token(id));
    }
    out += arr.dump();
    out += '\n';
    if (out.size() > (1 << 16)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}
}  // namespace

void add_tokenize_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("tokenize", "WordPiece-tokenise lines of standard input (one JSON array per line)");
  auto o = std::make_shared<TokenizeOptions>();
  cmd->add_option("--vocab", o->vocab, "Directory with vocab.txt (and tokenizer_config.json)")->required();
  cmd->add_flag("--ids", o->ids, "Write token ids instead of token strings");
  cmd->add_flag("--pair", o->pair, "Each line holds two segments separated by a tab");
  cmd->add_flag("--special", o->special, "Add [CLS] and [SEP] tokens");
  cmd->add_option("--max-length", o->max_length, "Truncate (longest first) to this many tokens");
  cmd->add_flag("--bench", o->bench, "Only measure tokenisation speed (words/s) over standard input");
  cmd->callback([o] { run_tokenize(*o); });
}

}  // namespace bertlab::app
