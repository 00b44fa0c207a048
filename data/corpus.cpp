#include "data/corpus.h"

#include <algorithm>
#include <cstdlib>
#include <regex>

#include "base/file_util.h"
#include "data/utf8.h"
#include "base/error.h"

namespace bertlab::data {
namespace fs = std::filesystem;
namespace {

std::string_view trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// Calls fn(line_number, line) for each line of a file, after checking it is valid UTF-8.
template <typename Fn>
void for_each_line(const fs::path& file, const std::string& text, Fn fn) {
  std::size_t pos = 0, line = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view s(text.data() + pos, end - pos);
    ++line;
    auto bad = find_invalid_utf8(s);
    check(bad == std::string_view::npos, "{}:{}: invalid UTF-8 at column {}", file.string(), line,
          bad + 1);
    fn(line, s);
    pos = end + 1;
  }
}

void read_text_file(const fs::path& file, std::vector<Document>& docs) {
  std::string text = read_file(file);
  std::size_t before = docs.size();
  bool open = false;
  for_each_line(file, text, [&](std::size_t line, std::string_view s) {
    s = trim(s);
    if (s.empty()) {
      open = false;
      return;
    }
    if (!open) {
      docs.push_back({fmt::format("{}:{}", file.string(), line), {}});
      open = true;
    }
    docs.back().sentences.emplace_back(s);
  });
  check(docs.size() > before, "{}: contains no text (expected one sentence per line, a blank "
        "line between documents)", file.string());
}

void read_brown_file(const fs::path& file, std::vector<Document>& docs) {
  std::string text = read_file(file);
  Document doc;
  for_each_line(file, text, [&](std::size_t line, std::string_view s) {
    s = trim(s);
    if (s.empty()) return;
    std::string sentence = detokenize_brown(s);
    if (sentence.empty()) return;
    if (doc.sentences.empty()) doc.source = fmt::format("{}:{}", file.string(), line);
    doc.sentences.push_back(std::move(sentence));
  });
  check(!doc.sentences.empty(), "{}: contains no Brown-format text (`word/TAG` tokens)",
        file.string());
  docs.push_back(std::move(doc));
}

bool is_brown_name(const fs::path& file) {
  static const std::regex pattern("c[a-r][0-9][0-9]");
  return std::regex_match(file.filename().string(), pattern);
}

std::string first_nonblank_line(const fs::path& file) {
  std::string text = read_file(file);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    auto s = trim(std::string_view(text.data() + pos, end - pos));
    if (!s.empty()) return std::string(s);
    pos = end + 1;
  }
  return {};
}

}  // namespace

fs::path data_cache_dir() {
  if (const char* d = std::getenv("BERTLAB_DATA"); d && *d) return d;
  const char* home = std::getenv("HOME");
  return fs::path(home && *home ? home : ".") / ".cache" / "bertlab";
}

fs::path resolve_corpus(const std::string& spec) {
  std::error_code ec;
  if (spec == "brown") {
    fs::path dir = data_cache_dir() / "brown";
    check(fs::is_directory(dir, ec) && fs::exists(dir / ".integrity", ec),
          "the Brown corpus is not in {}: run scripts/fetch_corpus.sh to fetch it", dir.string());
    return dir;
  }
  check(fs::exists(spec, ec), "{}: corpus path does not exist", spec);
  return spec;
}

std::vector<Document> read_corpus(const fs::path& path, CorpusFormat format) {
  std::error_code ec;
  check(fs::exists(path, ec), "{}: corpus path does not exist", path.string());
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec);
    check(!ec, "{}: cannot read directory: {}", path.string(), ec.message());
    for (auto end = fs::recursive_directory_iterator(); it != end; it.increment(ec)) {
      check(!ec, "{}: cannot read directory: {}", path.string(), ec.message());
      auto name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec)) files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    if (format != CorpusFormat::text) {
      // The Brown distribution: text files named c<genre><number>, beside CONTENTS and README.
      std::vector<fs::path> brown;
      std::copy_if(files.begin(), files.end(), std::back_inserter(brown), is_brown_name);
      if (format == CorpusFormat::brown ||
          (!brown.empty() && looks_like_brown(first_nonblank_line(brown.front())))) {
        format = CorpusFormat::brown;
        if (!brown.empty()) files = std::move(brown);
      }
    }
    check(!files.empty(), "{}: directory holds no corpus files", path.string());
  } else {
    // A device (/dev/zero) or pipe never ends: only regular files are read.
    check(fs::is_regular_file(path, ec), "{}: not a regular file (a device, pipe or socket); give a corpus file or "
          "a directory of them", path.string());
    files.push_back(path);
    if (format == CorpusFormat::automatic && looks_like_brown(first_nonblank_line(path)))
      format = CorpusFormat::brown;
  }
  std::vector<Document> docs;
  for (const auto& f : files) {
    if (format == CorpusFormat::brown)
      read_brown_file(f, docs);
    else
      read_text_file(f, docs);
  }
  check(!docs.empty(), "{}: corpus has no documents", path.string());
  return docs;
}

namespace {

// Calls f on each token of `line` (runs of characters other than spaces and tabs), in order.
template <class F>
void for_each_token(std::string_view line, F&& f) {
  std::size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
    if (pos >= line.size()) break;
    std::size_t end = pos;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
    f(line.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace

bool looks_like_brown(std::string_view line) {
  std::size_t tokens = 0, tagged = 0;
  for_each_token(line, [&](std::string_view tok) {
    ++tokens;
    auto slash = tok.rfind('/');
    if (slash != std::string_view::npos && slash > 0 && slash + 1 < tok.size()) ++tagged;
  });
  return tokens > 0 && tagged * 10 >= tokens * 9;
}

std::string detokenize_brown(std::string_view line) {
  std::string out;
  bool glue_next = false;  // the previous word opens (a bracket or an opening quote)
  for_each_token(line, [&](std::string_view tok) {
    auto slash = tok.rfind('/');
    std::string_view word = (slash == std::string_view::npos || slash == 0) ? tok : tok.substr(0, slash);
    bool opens = false, closes = false;
    std::string_view text = word;
    if (word == "``") {
      text = "\"";
      opens = true;
    } else if (word == "''") {
      text = "\"";
      closes = true;
    } else if (word == "(" || word == "[" || word == "{") {
      opens = true;
    } else if (word == "," || word == "." || word == ";" || word == ":" || word == "!" ||
               word == "?" || word == ")" || word == "]" || word == "}" || word == "'" ||
               word == "'s" || word == "n't" || word == "%") {
      closes = true;
    }
    if (!out.empty() && !glue_next && !closes) out += ' ';
    out += text;
    glue_next = opens;
  });
  return out;
}

}  // namespace bertlab::data
