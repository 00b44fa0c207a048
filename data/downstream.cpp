#include "data/downstream.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <unordered_map>

#include "data/corpus.h"
#include "base/file_util.h"
#include "data/pretraining.h"
#include "base/error.h"

namespace bertlab::data {

namespace fs = std::filesystem;

namespace {

struct TaggedWord {
  std::string word, tag;
};

struct BrownDoc {
  std::string name;  // file name, e.g. ca01
  std::vector<std::vector<TaggedWord>> sentences;
};

// The Brown files in the order read_corpus() reads them (sorted paths), so that
// split_documents() holds out the same documents as `prepare` for pretraining.
std::vector<BrownDoc> read_brown(const fs::path& dir) {
  static const std::regex pattern("c[a-r][0-9][0-9]");
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && std::regex_match(e.path().filename().string(), pattern)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  check(!files.empty(), "{}: no Brown corpus files (c[a-r][0-9][0-9]); run scripts/fetch_corpus.sh", dir.string());
  std::vector<BrownDoc> docs;
  for (const auto& f : files) {
    BrownDoc d{f.filename().string(), {}};
    const std::string text = read_file(f);
    size_t pos = 0, line = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      ++line;
      std::vector<TaggedWord> sentence;
      size_t i = pos;
      while (i < end) {
        while (i < end && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
        size_t j = i;
        while (j < end && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
        if (j > i) {
          std::string_view tok(text.data() + i, j - i);
          const size_t slash = tok.rfind('/');
          check(slash != std::string_view::npos && slash > 0 && slash + 1 < tok.size(),
                "{}:{}: '{}' is not a Brown word/TAG token", f.string(), line, tok);
          sentence.push_back({std::string(tok.substr(0, slash)), std::string(tok.substr(slash + 1))});
        }
        i = j;
      }
      if (!sentence.empty()) d.sentences.push_back(std::move(sentence));
      pos = end + 1;
    }
    if (!d.sentences.empty()) docs.push_back(std::move(d));
  }
  return docs;
}

std::string csv_field(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

std::string sentence_text(const std::vector<TaggedWord>& s) {
  std::string line;
  for (const auto& w : s) line += (line.empty() ? "" : " ") + w.word + "/" + w.tag;
  return detokenize_brown(line);
}

// The most frequent label of a count map (ties: the smaller label).
template <typename Map>
std::string most_frequent(const Map& counts) {
  std::string best;
  size_t n = 0;
  for (const auto& [label, c] : counts)
    if (c > n || (c == n && label < best)) best = label, n = c;
  return best;
}

}  // namespace

std::string brown_base_tag(std::string_view tag) {
  const bool has_letter = std::any_of(tag.begin(), tag.end(), [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)); });
  if (!has_letter) return std::string(tag);
  const size_t cut = tag.find_first_of("-+*", 1);
  return std::string(tag.substr(0, cut));
}

std::string brown_category(std::string_view file_name) {
  static const std::map<char, const char*> names{
      {'a', "news"},     {'b', "editorial"},     {'c', "reviews"},   {'d', "religion"},  {'e', "hobbies"},
      {'f', "lore"},     {'g', "belles_lettres"}, {'h', "government"}, {'j', "learned"},  {'k', "fiction"},
      {'l', "mystery"},  {'m', "science_fiction"}, {'n', "adventure"}, {'p', "romance"},  {'r', "humor"}};
  check(file_name.size() >= 2 && names.count(file_name[1]), "'{}' is not a Brown file name", file_name);
  return names.at(file_name[1]);
}

DownstreamStats prepare_downstream(const fs::path& brown_dir, DownstreamTask task, const BertTokenizer* tok,
                                   const DownstreamOptions& o, const fs::path& out) {
  std::error_code ec;
  if (fs::exists(out, ec))
    check(o.overwrite || (fs::is_directory(out, ec) && fs::is_empty(out, ec)),
          "{}: output directory already exists and is not empty (pass --force to replace it)", out.string());
  check(task != DownstreamTask::genre || tok, "--task genre needs --vocab (chunks are measured in word pieces)");
  check(o.max_tokens >= 8, "--seq-len {} is too short for genre chunks", o.max_tokens);
  check(o.validation_fraction >= 0 && o.validation_fraction < 1,
        "--validation-fraction {}: expected a fraction in [0, 1) of the training documents", o.validation_fraction);
  const auto docs = read_brown(brown_dir);
  const auto split = split_documents(docs.size(), o.eval_fraction, o.seed);
  // The validation documents: a fraction of the training ones (never the held-out ones), by a
  // second split of them with the next seed.
  std::vector<size_t> train_docs = split.train, validation_docs;
  if (o.validation_fraction > 0) {
    const auto inner = split_documents(split.train.size(), o.validation_fraction, o.seed + 1);
    train_docs.clear();
    for (size_t i : inner.train) train_docs.push_back(split.train[i]);
    for (size_t i : inner.eval) validation_docs.push_back(split.train[i]);
    std::sort(validation_docs.begin(), validation_docs.end());
    check(!train_docs.empty(), "--validation-fraction {} leaves no training documents", o.validation_fraction);
  }
  DownstreamStats st;
  st.train_documents = train_docs.size(), st.eval_documents = split.eval.size();
  st.validation_documents = validation_docs.size();
  std::vector<size_t> eval_sorted = split.eval;
  std::sort(eval_sorted.begin(), eval_sorted.end());
  for (size_t i : eval_sorted) st.eval_document_names.push_back(docs[i].name);
  for (size_t i : validation_docs) st.validation_document_names.push_back(docs[i].name);

  // The parts written: training, held-out evaluation and (when asked) validation.
  struct Part {
    const std::vector<size_t>* docs;
    const char* name;
    std::string text;
    std::map<std::string, size_t> labels;
    size_t* examples;
    size_t* tokens;
  };
  std::vector<Part> parts{{&train_docs, "train", {}, {}, &st.train_examples, &st.train_tokens},
                          {&eval_sorted, "eval", {}, {}, &st.eval_examples, &st.eval_tokens}};
  if (!validation_docs.empty())
    parts.push_back({&validation_docs, "validation", {}, {}, &st.validation_examples, &st.validation_tokens});
  const char* extension = task == DownstreamTask::pos ? ".conll" : ".csv";
  switch (task) {
    case DownstreamTask::pos: {
      std::unordered_map<std::string, std::map<std::string, size_t>> tag_of_word;
      for (auto& part : parts)
        for (size_t d : *part.docs)
          for (const auto& s : docs[d].sentences) {
            for (const auto& w : s) {
              const std::string tag = brown_base_tag(w.tag);
              part.text += w.word + "\t" + tag + "\n";
              ++part.labels[tag];
              if (&part == &parts[0]) ++tag_of_word[w.word][tag];
            }
            part.text += "\n";
            ++*part.examples;
            *part.tokens += s.size();
          }
      // Baselines on the evaluation words: each word's most frequent training tag (the overall
      // most frequent tag for unseen words), and the overall most frequent tag.
      const std::string overall = most_frequent(parts[0].labels);
      size_t right = 0, oov = 0;
      for (size_t d : eval_sorted)
        for (const auto& s : docs[d].sentences)
          for (const auto& w : s) {
            auto it = tag_of_word.find(w.word);
            oov += it == tag_of_word.end();
            right += (it == tag_of_word.end() ? overall : most_frequent(it->second)) == brown_base_tag(w.tag);
          }
      st.most_frequent_tag_accuracy = st.eval_tokens ? double(right) / double(st.eval_tokens) : 0;
      st.oov_rate = st.eval_tokens ? double(oov) / double(st.eval_tokens) : 0;
      break;
    }
    case DownstreamTask::genre: {
      for (auto& part : parts) {
        part.text = "text,label\n";
        for (size_t d : *part.docs) {
          const std::string label = brown_category(docs[d].name);
          std::string chunk;
          size_t pieces = 0;
          auto flush = [&] {
            if (chunk.empty()) return;
            part.text += csv_field(chunk) + "," + label + "\n";
            ++part.labels[label];
            ++*part.examples;
            chunk.clear(), pieces = 0;
          };
          for (const auto& s : docs[d].sentences) {
            const std::string sentence = sentence_text(s);
            const size_t n = tok->encode_ids(sentence).size();
            if (pieces > 0 && pieces + n + 2 > o.max_tokens) flush();
            // A sentence longer than a chunk becomes a chunk of its own (truncated when encoded).
            chunk += (chunk.empty() ? "" : " ") + sentence;
            pieces += n;
          }
          flush();
        }
      }
      break;
    }
  }
  st.labels = std::max(parts[0].labels.size(), parts[1].labels.size());
  const std::string majority = most_frequent(parts[0].labels);
  const auto& eval_labels = parts[1].labels;
  size_t eval_total = 0;
  for (const auto& [l, c] : eval_labels) eval_total += c;
  st.majority_accuracy = eval_total && eval_labels.count(majority) ? double(eval_labels.at(majority)) / double(eval_total) : 0;
  std::vector<std::pair<std::string, std::string>> files;
  for (auto& part : parts) files.emplace_back(std::string(part.name) + extension, std::move(part.text));

  const fs::path tmp = temporary_sibling(out);
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  try {
    for (const auto& [name, text] : files) write_file_atomic(tmp / name, text);
    nlohmann::json meta{{"task", to_string(task)},
                        {"corpus", brown_dir.string()}, {"seed", o.seed}, {"eval_fraction", o.eval_fraction},
                        {"eval_documents", st.eval_document_names}, {"train_examples", st.train_examples},
                        {"validation_fraction", o.validation_fraction},
                        {"validation_documents", st.validation_document_names},
                        {"validation_examples", st.validation_examples},
                        {"eval_examples", st.eval_examples}, {"labels", st.labels},
                        {"majority_class_accuracy", st.majority_accuracy}};
    if (task == DownstreamTask::pos)
      meta["most_frequent_tag_accuracy"] = st.most_frequent_tag_accuracy, meta["oov_rate"] = st.oov_rate;
    else
      meta["max_tokens"] = o.max_tokens;
    write_file_atomic(tmp / "meta.json", meta.dump(2) + "\n");
    if (fs::exists(out, ec)) {
      const fs::path old = temporary_sibling(out);
      fs::rename(out, old);
      fs::rename(tmp, out);
      fs::remove_all(old, ec);
    } else {
      fs::rename(tmp, out);
    }
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return st;
}

}  // namespace bertlab::data
