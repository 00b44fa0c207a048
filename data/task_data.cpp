#include "data/task_data.h"

#include <csv.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "base/file_util.h"
#include "data/utf8.h"
#include "base/error.h"
#include "base/json_file.h"

namespace bertlab::data {

namespace fs = std::filesystem;

namespace {

// Calls fn(line_number, line) for every line (without "\n" and a trailing "\r"), after
// checking it is UTF-8.
template <typename Fn>
void for_each_line(const fs::path& file, std::string_view text, Fn&& fn) {
  size_t pos = 0, line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view s(text.data() + pos, end - pos);
    ++line;
    if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
    auto bad = find_invalid_utf8(s);
    check(bad == std::string_view::npos, "{}:{}: invalid UTF-8 at column {}", file.string(), line,
          bad + 1);
    fn(line, s);
    pos = end + 1;
  }
}

struct Row {
  size_t line = 0;
  std::vector<std::string> fields;
};

// RFC 4180 records (libcsv, strict mode: a quote inside an unquoted field or an unterminated
// quoted field is an error); a record may span lines inside quotes. Blank lines are skipped.
std::vector<Row> parse_csv(const fs::path& file, std::string_view text) {
  struct State {
    std::vector<Row> rows;
    Row cur;
    size_t line = 1, record_line = 1;
    bool in_record = false;  // a field of the current record has been seen
    bool open = false;       // the parser is inside a record (perhaps a quoted field)
  } st;
  csv_parser p;
  check(csv_init(&p, CSV_STRICT | CSV_STRICT_FINI) == 0, "cannot initialise the CSV parser");
  csv_set_space_func(&p, [](unsigned char) { return 0; });  // spaces belong to the field
  auto on_field = [](void* s, size_t n, void* data) {
    auto& st = *static_cast<State*>(data);
    if (!st.in_record) st.in_record = true, st.cur.line = st.record_line;
    st.cur.fields.emplace_back(static_cast<const char*>(s), n);
  };
  auto on_record = [](int, void* data) {
    auto& st = *static_cast<State*>(data);
    if (st.in_record) st.rows.push_back(std::move(st.cur));
    st.cur = {};
    st.in_record = false;
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    end = end == std::string::npos ? text.size() : end + 1;
    auto bad = find_invalid_utf8(text.substr(pos, end - pos));
    if (bad != std::string_view::npos) {
      csv_free(&p);
      fail("{}:{}: invalid UTF-8 at column {}", file.string(), st.line, bad + 1);
    }
    if (!st.open) st.record_line = st.line;
    const size_t before = st.rows.size();
    if (csv_parse(&p, text.data() + pos, end - pos, on_field, on_record, &st) != end - pos) {
      std::string why = csv_strerror(csv_error(&p));
      csv_free(&p);
      fail("{}:{}: invalid CSV ({}; quote a field holding commas or quotes, and double the quotes inside it, as RFC 4180)",
           file.string(), st.line, why);
    }
    const bool blank = text.find_first_not_of("\r\n", pos) >= end;
    st.open = (st.open || !blank) && st.rows.size() == before;
    ++st.line;
    pos = end;
  }
  const bool ok = csv_fini(&p, on_field, on_record, &st) == 0;
  csv_free(&p);
  check(ok, "{}:{}: invalid CSV: a quoted field is not closed", file.string(), st.record_line);
  return std::move(st.rows);
}

// GLUE's .tsv: fields separated by tabs, no quoting.
std::vector<Row> parse_tsv(const fs::path& file, std::string_view text) {
  std::vector<Row> rows;
  for_each_line(file, text, [&](size_t line, std::string_view s) {
    if (s.empty()) return;
    Row r{line, {}};
    size_t pos = 0;
    while (true) {
      size_t tab = s.find('\t', pos);
      r.fields.emplace_back(s.substr(pos, tab == std::string_view::npos ? s.npos : tab - pos));
      if (tab == std::string_view::npos) break;
      pos = tab + 1;
    }
    rows.push_back(std::move(r));
  });
  return rows;
}

// Which columns hold text and label, by name.
struct Columns {
  int text = -1, pair = -1, label = -1;
};

Columns pick_columns(const std::vector<std::string>& names, const std::string& where,
                     bool require_labels) {
  Columns c;
  auto find = [&](const char* n) {
    auto it = std::find(names.begin(), names.end(), n);
    return it == names.end() ? -1 : static_cast<int>(it - names.begin());
  };
  c.label = find("label");
  check(!require_labels || c.label >= 0,
        "{}: no 'label' column (columns: {}); expected text[, text_pair], label", where,
        fmt::join(names, ", "));
  if (find("text") >= 0) {
    c.text = find("text"), c.pair = find("text_pair");
  } else if (find("sentence1") >= 0 && find("sentence2") >= 0) {
    c.text = find("sentence1"), c.pair = find("sentence2");
  } else {
    std::vector<int> rest;
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] != "label" && names[i] != "idx" && names[i] != "id") rest.push_back(static_cast<int>(i));
    check(!rest.empty(), "{}: no text column (columns: {}); expected text[, text_pair], label", where,
          fmt::join(names, ", "));
    c.text = rest[0];
    if (rest.size() > 1) c.pair = rest[1];
  }
  return c;
}

TextExample make_example(const std::vector<std::string>& f, const Columns& c, const std::string& source,
                         const std::vector<std::string>& names) {
  TextExample ex;
  ex.source = source;
  ex.text = f[c.text];
  if (c.pair >= 0) ex.text_pair = f[c.pair], ex.has_pair = true;
  if (c.label >= 0) {
    ex.label = f[c.label];
    check(!ex.label.empty(), "{}: field '{}' is empty", source, names[c.label]);
  }
  return ex;
}

std::vector<TextExample> read_table(const fs::path& file, const std::vector<Row>& rows,
                                    bool require_labels) {
  const std::string name = file.string();
  check(!rows.empty(), "{}: the file is empty (expected a header line and examples)", name);
  const auto& header = rows[0].fields;
  const Columns c = pick_columns(header, fmt::format("{}:{}: header", name, rows[0].line), require_labels);
  std::vector<TextExample> out;
  for (size_t r = 1; r < rows.size(); ++r) {
    const auto& row = rows[r];
    const std::string src = fmt::format("{}:{}", name, row.line);
    check(row.fields.size() <= header.size(),
          "{}: too many fields: {}, the header has {} ({}); quote fields that hold the delimiter",
          src, row.fields.size(), header.size(), fmt::join(header, ", "));
    check(row.fields.size() == header.size(), "{}: too few fields: {}, the header has {} ({}); field '{}' is missing",
          src, row.fields.size(), header.size(), fmt::join(header, ", "), header[row.fields.size()]);
    out.push_back(make_example(row.fields, c, src, header));
  }
  return out;
}

std::vector<TextExample> read_jsonl(const fs::path& file, std::string_view text, bool require_labels) {
  std::vector<TextExample> out;
  std::optional<Columns> cols;
  std::vector<std::string> keys;
  for_each_line(file, text, [&](size_t line, std::string_view s) {
    if (s.find_first_not_of(" \t") == std::string_view::npos) return;
    const std::string src = fmt::format("{}:{}", file.string(), line);
    nlohmann::json j;
    try {  // nesting is limited: printing a value in an error recurses once per level
      j = nlohmann::json::parse(s, detail::limit_json_depth);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number past double
      fail("{}: invalid JSON: {}", src, e.what());
    } catch (const detail::JsonTooDeep&) {
      fail("{}: invalid JSON: arrays and objects are nested more than {} levels deep", src, kMaxJsonDepth);
    }
    check(j.is_object(), "{}: expected a JSON object with text[, text_pair] and label", src);
    if (!cols) {  // the first object's keys name the columns, as a header would
      for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
      cols = pick_columns(keys, src, require_labels);
    }
    std::vector<std::string> f(keys.size());
    size_t known = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      const bool needed = static_cast<int>(i) == cols->text || static_cast<int>(i) == cols->pair ||
                          static_cast<int>(i) == cols->label;
      if (!j.contains(keys[i])) {
        check(!needed, "{}: field '{}' is missing", src, keys[i]);
        continue;
      }
      ++known;
      const auto& v = j.at(keys[i]);
      if (v.is_string()) f[i] = v.get<std::string>();
      else if (v.is_number_integer() || v.is_boolean()) f[i] = v.dump();
      else check(!needed, "{}: field '{}' must be a string or an integer, got {}", src, keys[i], v.dump());
    }
    check(known == j.size(), "{}: too many fields: {}, the first line has {} ({})", src, j.size(),
          keys.size(), fmt::join(keys, ", "));
    out.push_back(make_example(f, *cols, src, keys));
  });
  return out;
}

}  // namespace

TableFormat table_format_for(const fs::path& file) {
  std::string ext = file.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (ext == ".csv") return TableFormat::csv;
  if (ext == ".tsv") return TableFormat::tsv;
  if (ext == ".jsonl" || ext == ".json") return TableFormat::jsonl;
  fail("{}: unknown file type '{}' (expected .csv, .tsv, .jsonl or .json; CoNLL files with --task token-cls)",
       file.string(), ext);
}

std::vector<TextExample> read_text_examples(const fs::path& file, bool require_labels) {
  check(fs::is_regular_file(file), "{}: no such file", file.string());
  const TableFormat format = table_format_for(file);
  return parse_text_examples(read_file(file), format, file, require_labels);
}

std::vector<TextExample> parse_text_examples(std::string_view text, TableFormat format, const fs::path& file,
                                             bool require_labels) {
  std::vector<TextExample> out;
  switch (format) {
    case TableFormat::csv: out = read_table(file, parse_csv(file, text), require_labels); break;
    case TableFormat::tsv: out = read_table(file, parse_tsv(file, text), require_labels); break;
    case TableFormat::jsonl: out = read_jsonl(file, text, require_labels); break;
  }
  check(!out.empty(), "{}: the file has no examples", file.string());
  return out;
}

std::vector<TaggedSentence> read_conll(const fs::path& file, bool require_labels) {
  check(fs::is_regular_file(file), "{}: no such file", file.string());
  return parse_conll(read_file(file), file, require_labels);
}

std::vector<TaggedSentence> parse_conll(std::string_view text, const fs::path& file, bool require_labels) {
  std::vector<TaggedSentence> out;
  TaggedSentence cur;
  auto flush = [&] {
    if (!cur.words.empty()) out.push_back(std::move(cur));
    cur = {};
  };
  for_each_line(file, text, [&](size_t line, std::string_view s) {
    if (s.find_first_not_of(" \t") == std::string_view::npos) return flush();
    if (s.rfind("-DOCSTART-", 0) == 0) return;
    const std::string src = fmt::format("{}:{}", file.string(), line);
    const size_t tab = s.find('\t');
    if (cur.words.empty()) cur.source = src;
    if (tab == std::string_view::npos) {
      check(!require_labels, "{}: expected word<TAB>tag, found no tab in '{}'", src, s);
      check(cur.tags.empty(), "{}: expected word<TAB>tag like the lines before, found no tab in '{}'", src, s);
      cur.words.emplace_back(s);
      return;
    }
    check(s.find('\t', tab + 1) == std::string_view::npos,
          "{}: too many fields: expected word<TAB>tag, found more than one tab", src);
    check(tab > 0, "{}: field 'word' is empty", src);
    check(tab + 1 < s.size(), "{}: field 'tag' is empty", src);
    check(cur.tags.size() == cur.words.size(), "{}: a tag here, but earlier lines of the sentence have none", src);
    cur.words.emplace_back(s.substr(0, tab));
    cur.tags.emplace_back(s.substr(tab + 1));
  });
  flush();
  check(!out.empty(), "{}: the file has no sentences (expected word<TAB>tag lines)", file.string());
  return out;
}

LabelSet::LabelSet(std::vector<std::string> names) : names_(std::move(names)) {
  for (size_t i = 0; i < names_.size(); ++i) {
    check(ids_.emplace(names_[i], static_cast<int32_t>(i)).second, "label '{}' appears twice", names_[i]);
  }
}

LabelSet LabelSet::from_examples(const std::vector<TextExample>& ex) {
  std::set<std::string> s;
  for (const auto& e : ex) s.insert(e.label);
  return LabelSet({s.begin(), s.end()});
}

LabelSet LabelSet::from_sentences(const std::vector<TaggedSentence>& sentences) {
  std::set<std::string> s;
  for (const auto& sent : sentences) s.insert(sent.tags.begin(), sent.tags.end());
  return LabelSet({s.begin(), s.end()});
}

int32_t LabelSet::id(const std::string& label, const std::string& source) const {
  auto it = ids_.find(label);
  check(it != ids_.end(), "{}: label '{}' is not among the {} labels of the training file", source,
        label, names_.size());
  return it->second;
}

EncodedExample encode_text(const BertTokenizer& tok, const TextExample& ex, int32_t label,
                           size_t max_length) {
  EncodeOptions o;
  o.truncation = true;
  o.max_length = max_length;
  Encoding e = ex.has_pair ? tok.encode(ex.text, std::string_view(ex.text_pair), o) : tok.encode(ex.text, std::nullopt, o);
  EncodedExample out;
  // Whether truncation cut anything: the untruncated length.
  const size_t full = tok.encode_ids(ex.text).size() + (ex.has_pair ? tok.encode_ids(ex.text_pair).size() + 3 : 2);
  out.truncated = full > e.ids.size();
  out.ids = std::move(e.ids);
  out.type_ids = std::move(e.type_ids);
  out.labels = {label};
  return out;
}

EncodedExample encode_words(const BertTokenizer& tok, const std::vector<std::string>& words,
                            const std::vector<int32_t>& tag_ids, size_t max_length) {
  check(max_length >= 2, "max_length {} leaves no room for [CLS] and [SEP]", max_length);
  check(tag_ids.empty() || tag_ids.size() == words.size(), "{} tags for {} words", tag_ids.size(), words.size());
  EncodedExample out;
  out.ids.push_back(tok.cls_id());
  out.labels.push_back(-100);
  out.word_of_token.push_back(-1);
  for (size_t w = 0; w < words.size(); ++w) {
    const auto pieces = tok.encode_ids(words[w]);
    for (size_t k = 0; k < pieces.size(); ++k) {
      if (out.ids.size() + 1 >= max_length) {
        out.truncated = true;
        break;
      }
      out.ids.push_back(pieces[k]);
      out.labels.push_back(k == 0 && !tag_ids.empty() ? tag_ids[w] : -100);
      out.word_of_token.push_back(static_cast<int32_t>(w));
    }
    if (out.truncated) break;
  }
  out.ids.push_back(tok.sep_id());
  out.labels.push_back(-100);
  out.word_of_token.push_back(-1);
  out.type_ids.assign(out.ids.size(), 0);
  return out;
}

}  // namespace bertlab::data
