// bertlab tokenize: WordPiece-tokenise lines of standard input, one JSON array per line.
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "base/error.h"
#include <fmt/core.h>

namespace bertlab::app {

namespace {
struct TokenizeOptions {
  std::string vocab;
  bool ids = false, pair = false, special = false, bench = false;
  std::size_t max_length = 0;
};

// A line is tokenised in memory (about 40 bytes per input byte): longer lines are refused,
// and reading stops there, so that a stream without newlines cannot take all memory.
constexpr std::size_t kMaxLineBytes = std::size_t{8} << 20;

// std::getline with the limit; `number` is the 1-based number of the line being read.
bool read_line(std::string& line, std::size_t number) {
  line.clear();
  std::streambuf* in = std::cin.rdbuf();
  for (int c = in->sbumpc(); ; c = in->sbumpc()) {
    if (c == std::char_traits<char>::eof()) return !line.empty();
    if (c == '\n') return true;
    check(line.size() < kMaxLineBytes, "standard input:{}: line longer than {} MiB; split the text into lines",
          number, kMaxLineBytes >> 20);
    line.push_back(static_cast<char>(c));
  }
}

// --bench: tokenise all of standard input in memory and report throughput, writing no tokens.
void run_benchmark(const data::BertTokenizer& tok) {
  std::vector<std::string> lines;
  std::string line;
  std::size_t words = 0, bytes = 0;
  while (read_line(line, lines.size() + 1)) {
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

void flush_to_stdout(std::string& out) {
  check(std::fwrite(out.data(), 1, out.size(), stdout) == out.size(), "cannot write standard output: {}",
        std::strerror(errno));
  out.clear();
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
  while (read_line(line, number + 1)) {
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
    // Written piece by piece (not as one JSON array value): a line of millions of tokens
    // needs memory for its ids only.
    out += '[';
    for (std::size_t k = 0; k < e.ids.size(); ++k) {
      if (k) out += ',';
      if (o.ids)
        out += std::to_string(e.ids[k]);
      else
        out += nlohmann::json(tok.vocab().token(e.ids[k])).dump();
      if (out.size() > (1 << 16)) flush_to_stdout(out);
    }
    out += "]\n";
    if (out.size() > (1 << 16)) flush_to_stdout(out);
  }
  flush_to_stdout(out);
  check(std::fflush(stdout) == 0 && !std::ferror(stdout), "cannot write standard output: {}", std::strerror(errno));
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
