// bertlab._bertlab: the compiled half of the Python package (apps/python/bertlab/ is the other).
// It holds no logic of its own: the tokenizer, model loading and the executor are those of
// runtime/, and estimate, profile, bench, calibrate, train and finetune run the CLI's own
// subcommands in-process (apps/commands.h), so both front ends give the same records.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <unistd.h>

#include "apps/python/infer_session.h"
#include "apps/commands.h"
#include "apps/common.h"
#include "base/error.h"
#include "ops/isa.h"
#include "data/tokenizer.h"

namespace py = pybind11;
namespace fs = std::filesystem;

namespace bertlab::python {
namespace {

// A bad argument from Python: becomes ValueError.
struct ArgumentError : Error {
  using Error::Error;
};
// A missing file or directory: becomes FileNotFoundError.
struct MissingFileError : Error {
  using Error::Error;
};

void require_dir_with(const fs::path& dir, const char* file, const char* what) {
  if (!fs::is_directory(dir)) throw MissingFileError(fmt::format("{}: no such directory (expected {})", dir.string(), what));
  if (!fs::exists(dir / file))
    throw MissingFileError(fmt::format("{}: no {} in this directory (expected {})", dir.string(), file, what));
}

// ---- Tokenizer -------------------------------------------------------------------------------

data::BertTokenizer load_tokenizer(const std::string& dir) {
  require_dir_with(dir, "vocab.txt", "a tokenizer directory with vocab.txt");
  return data::BertTokenizer::load(dir);
}

// ids, type ids of one text or pair, as `bertlab tokenize --ids [--pair] [--special] [--max-length]`.
py::tuple encode(const data::BertTokenizer& tok, const std::string& a, const std::optional<std::string>& b,
                 bool add_special_tokens, std::optional<std::size_t> max_length) {
  data::EncodeOptions enc;
  enc.add_special_tokens = add_special_tokens;
  if (max_length) {
    if (*max_length == 0) throw ArgumentError("max_length: expected a number above 0, got 0");
    enc.truncation = true;
    enc.max_length = *max_length;
  }
  std::optional<std::string_view> bv;
  if (b) bv = *b;
  data::Encoding e = tok.encode(a, bv, enc);
  return py::make_tuple(e.ids, e.type_ids);
}

// ---- Model -----------------------------------------------------------------------------------

// An (batch, seq) integer array as int32, or ArgumentError naming `name`.
std::vector<int32_t> int_matrix(const py::array& a, const char* name, std::vector<py::ssize_t>& shape) {
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u' && kind != 'b')
    throw ArgumentError(fmt::format("{}: expected an integer array (int32 or int64), got dtype {}", name,
                                    std::string(py::str(a.dtype()))));
  if (a.ndim() != 2) {
    std::vector<py::ssize_t> s(a.shape(), a.shape() + a.ndim());
    throw ArgumentError(fmt::format("{}: expected a 2-D array (batch, seq), got shape ({})", name, fmt::join(s, ", ")));
  }
  if (shape.empty()) {
    shape = {a.shape(0), a.shape(1)};
    if (shape[0] == 0 || shape[1] == 0)
      throw ArgumentError(fmt::format("{}: empty array of shape ({}, {})", name, shape[0], shape[1]));
  } else if (a.shape(0) != shape[0] || a.shape(1) != shape[1]) {
    throw ArgumentError(fmt::format("{}: shape ({}, {}) does not match input_ids ({}, {})", name, a.shape(0),
                                    a.shape(1), shape[0], shape[1]));
  }
  auto v = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  std::vector<int32_t> out(static_cast<std::size_t>(v.size()));
  const int64_t* p = v.data();
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (p[i] < INT32_MIN || p[i] > INT32_MAX)
      throw ArgumentError(fmt::format("{}[{}][{}] = {} is out of range", name, i / shape[1], i % shape[1], p[i]));
    out[i] = static_cast<int32_t>(p[i]);
  }
  return out;
}

BertInputs to_inputs(const py::array& ids, const std::optional<py::array>& types, const std::optional<py::array>& mask) {
  std::vector<py::ssize_t> shape;
  BertInputs in;
  in.input_ids = int_matrix(ids, "input_ids", shape);
  in.batch = shape[0], in.seq = shape[1];
  in.token_type_ids = types ? int_matrix(*types, "token_type_ids", shape) : std::vector<int32_t>(in.input_ids.size(), 0);
  in.attention_mask = mask ? int_matrix(*mask, "attention_mask", shape) : std::vector<int32_t>(in.input_ids.size(), 1);
  return in;
}

class PyModel {
 public:
  PyModel(const std::string& dir, const std::string& precision, int threads, std::vector<std::string> no_fuse,
          bool encoder_only) {
    require_dir_with(dir, "config.json", "a model directory: config.json [+ model.safetensors]");
    if (threads < 0 || threads > app::kMaxThreads)
      throw ArgumentError(fmt::format("threads: expected 1 to {} (or 0: all cores), got {}", app::kMaxThreads, threads));
    Precision p = Precision::fp32;
    std::string note;
    try {
      p = app::parse_precision(precision, "precision", &note);
    } catch (const Error& e) {
      throw ArgumentError(e.what());
    }
    try {
      (void)app::resolve_config(dir);  // a config that is not BERT's is a bad argument
    } catch (const Error& e) {
      throw ArgumentError(e.what());
    }
    session_ = std::make_unique<InferSession>(dir, p, threads, std::move(no_fuse), encoder_only);
    if (!note.empty()) notes_.push_back(note);
    for (auto& n : session_->notes()) notes_.push_back(n);
  }

  py::dict call(const py::array& ids, const std::optional<py::array>& types, const std::optional<py::array>& mask) {
    BertInputs in = to_inputs(ids, types, mask);
    try {
      validate_inputs(in, session_->config(), "model input");
    } catch (const Error& e) {
      throw ArgumentError(e.what());
    }
    std::vector<InferOutput> outs;
    {
      py::gil_scoped_release nogil;
      outs = session_->run(in);
    }
    py::dict d;
    for (auto& o : outs) {
      // The array views the executor's arena; the capsule keeps that executor alive (and out of
      // use for later calls) until the last array of this call is gone.
      auto* keep = new std::shared_ptr<void>(o.owner);
      py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
      std::vector<py::ssize_t> shape(o.shape.begin(), o.shape.end());
      d[py::str(o.name)] = py::array_t<float>(shape, o.data, base);
    }
    return d;
  }

  const BertConfig& config() const { return session_->config(); }
  std::string heads() const { return to_string(session_->heads()); }
  std::vector<std::string> notes() const { return notes_; }

 private:
  std::unique_ptr<InferSession> session_;
  std::vector<std::string> notes_;
};

// ---- The CLI's subcommands in-process --------------------------------------------------------

// A JSON value as Python objects, as json.loads of its dump would give them (NaN and infinities
// are dumped as null).
py::object to_python(const nlohmann::json& j) {
  using V = nlohmann::json::value_t;
  switch (j.type()) {
    case V::null:
    case V::binary:
    case V::discarded:
      return py::none();
    case V::boolean:
      return py::bool_(j.get<bool>());
    case V::number_integer:
      return py::int_(j.get<int64_t>());
    case V::number_unsigned:
      return py::int_(j.get<uint64_t>());
    case V::number_float: {
      const double x = j.get<double>();
      return std::isfinite(x) ? py::object(py::float_(x)) : py::object(py::none());
    }
    case V::string:
      return py::str(j.get_ref<const std::string&>());
    case V::array: {
      py::list out(j.size());
      std::size_t i = 0;
      for (const auto& v : j) out[i++] = to_python(v);
      return out;
    }
    case V::object: {
      py::dict out;
      for (const auto& [k, v] : j.items()) out[py::str(k)] = to_python(v);
      return out;
    }
  }
  return py::none();
}

// Standard output and error of the process go to a temporary file while a command runs (fd 1
// and 2, so that C's and C++'s streams are caught alike); the text is returned.
class CapturedOutput {
 public:
  CapturedOutput() {
    std::fflush(stdout), std::fflush(stderr), std::cout.flush(), std::cerr.flush();
    char name[] = "/tmp/bertlab-py-XXXXXX";
    fd_ = mkstemp(name);
    check(fd_ >= 0, "cannot create a temporary file for the command's output");
    path_ = name;
    saved_out_ = dup(1), saved_err_ = dup(2);
    dup2(fd_, 1), dup2(fd_, 2);
  }
  ~CapturedOutput() { restore(); }
  // Python code run while the command runs (a step callback, tqdm) writes where it would have.
  void suspend() {
    if (saved_out_ < 0) return;
    std::fflush(stdout), std::fflush(stderr), std::cout.flush(), std::cerr.flush();
    dup2(saved_out_, 1), dup2(saved_err_, 2);
  }
  void resume() {
    if (saved_out_ < 0) return;
    dup2(fd_, 1), dup2(fd_, 2);
  }
  std::string finish() {
    restore();
    std::ifstream f(path_);
    std::stringstream s;
    s << f.rdbuf();
    fs::remove(path_);
    return s.str();
  }

 private:
  void restore() {
    if (saved_out_ < 0) return;
    std::fflush(stdout), std::fflush(stderr), std::cout.flush(), std::cerr.flush();
    dup2(saved_out_, 1), dup2(saved_err_, 2);
    close(saved_out_), close(saved_err_), close(fd_);
    saved_out_ = saved_err_ = -1;
  }
  int fd_ = -1, saved_out_ = -1, saved_err_ = -1;
  std::string path_;
};

// SIGINT and SIGTERM as Python had them, put back after a command (train and finetune take them
// over to stop at a step boundary).
class SavedSignals {
 public:
  SavedSignals() { sigaction(SIGINT, nullptr, &int_), sigaction(SIGTERM, nullptr, &term_); }
  ~SavedSignals() { sigaction(SIGINT, &int_, nullptr), sigaction(SIGTERM, &term_, nullptr); }

 private:
  struct sigaction int_ {}, term_ {};
};

// The options of a subcommand: long name without dashes -> takes a value (false: a flag).
std::vector<std::pair<std::string, bool>> command_options(const std::string& name) {
  CLI::App root;
  app::add_all_commands(root);
  CLI::App* cmd = root.get_subcommand(name);
  std::vector<std::pair<std::string, bool>> out;
  for (const CLI::Option* o : cmd->get_options()) {
    if (o->get_lnames().empty()) continue;
    for (const auto& n : o->get_lnames()) out.emplace_back(n, o->get_expected_max() != 0);  // flags expect 0 values
  }
  return out;
}

// Runs `bertlab ARGS...` and returns its standard output and error as one text. on_step(report
// dict) is called after every training step with the GIL held; an exception from it (or a
// KeyboardInterrupt from a pending signal) stops training after that step, as SIGINT does, and
// is raised when the command has returned. With `echo` the output is not captured. Returns the
// text, whether training was stopped by a signal (SIGINT, SIGTERM) at a step boundary, and the
// document the command wrote to `json_path` (its --json), as Python objects instead of a file.
py::tuple run_command(const std::vector<std::string>& args, const py::object& on_step, bool echo,
                      const std::string& json_path) {
  // One command at a time in the process: the step observer, the stop flag and the capture of
  // fd 1 and 2 are the process's.
  static std::mutex one_at_a_time;
  std::unique_lock<std::mutex> lock(one_at_a_time, std::defer_lock);
  {
    py::gil_scoped_release nogil;
    lock.lock();
  }
  CLI::App root{"bertlab"};
  root.require_subcommand(1);
  app::add_all_commands(root);
  std::vector<std::string> argv_s{"bertlab"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());

  std::optional<py::error_already_set> raised;
  std::optional<CapturedOutput> capture;
  if (!on_step.is_none())
    app::set_step_observer([&](const app::StepReport& r) {
      py::gil_scoped_acquire gil;
      if (raised) return;
      if (capture) capture->suspend();
      try {
        py::dict metrics;
        for (const auto& [k, v] : r.metrics) metrics[py::str(k)] = v;
        on_step(r.step, r.max_steps, r.loss, metrics, r.lr, r.seq_per_s, r.logged);
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      } catch (py::error_already_set& e) {
        raised = std::move(e);
        app::stop_at_next_step();
      }
      if (capture) {
        // What Python buffered goes out now, before fd 1 and 2 point at the capture again.
        auto sys = py::module_::import("sys");
        for (const char* stream : {"stdout", "stderr"}) {
          try {
            sys.attr(stream).attr("flush")();
          } catch (py::error_already_set&) {
          }
        }
        capture->resume();
      }
    });
  py::object json_doc = py::none();
  if (!json_path.empty())
    app::set_json_sink(json_path, [&](const nlohmann::json& doc) {
      py::gil_scoped_acquire gil;
      json_doc = to_python(doc);
    });
  struct ObserverReset {
    ~ObserverReset() { app::set_step_observer(nullptr), app::set_json_sink("", nullptr); }
  } reset;
  SavedSignals signals;
  if (!echo) capture.emplace();
  std::string text;
  try {
    py::gil_scoped_release nogil;
    (void)ops::active_isa();
    root.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    if (capture) text = capture->finish();
    if (raised) throw *raised;
    throw ArgumentError(e.what());
  } catch (...) {
    if (capture) text = capture->finish();
    if (raised) throw *raised;
    throw;
  }
  if (capture) text = capture->finish();
  if (raised) throw *raised;
  return py::make_tuple(text, app::stop_requested(), json_doc);
}

}  // namespace
}  // namespace bertlab::python

PYBIND11_MODULE(_bertlab, m) {
  using namespace bertlab;
  using namespace bertlab::python;
  m.doc() = "The compiled half of bertlab (use the bertlab package)";

  static py::exception<Error> error(m, "Error");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ArgumentError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const MissingFileError& e) {
      PyErr_SetString(PyExc_FileNotFoundError, e.what());
    } catch (const Error& e) {
      error(e.what());
    } catch (const fs::filesystem_error& e) {
      PyErr_SetString(e.code() == std::errc::no_such_file_or_directory ? PyExc_FileNotFoundError : PyExc_OSError,
                      e.what());
    }
  });

  py::class_<data::BertTokenizer>(m, "Tokenizer")
      .def(py::init(&load_tokenizer), py::arg("directory"))
      .def("encode", &encode, py::arg("text"), py::arg("text_pair") = py::none(), py::arg("add_special_tokens") = true,
           py::arg("max_length") = py::none())
      .def("tokenize", py::overload_cast<std::string_view>(&data::BertTokenizer::tokenize, py::const_), py::arg("text"))
      .def("token", [](const data::BertTokenizer& t, int64_t id) {
        if (id < 0 || id >= static_cast<int64_t>(t.vocab().size()))
          throw ArgumentError(fmt::format("token id {} is outside the vocabulary [0, {})", id, t.vocab().size()));
        return t.vocab().token(static_cast<int32_t>(id));
      })
      .def("find", [](const data::BertTokenizer& t, const std::string& s) { return t.vocab().find(s); })
      .def("is_special", &data::BertTokenizer::is_special)
      .def_property_readonly("vocab_size", [](const data::BertTokenizer& t) { return t.vocab().size(); })
      .def_property_readonly("pad_id", &data::BertTokenizer::pad_id)
      .def_property_readonly("cls_id", &data::BertTokenizer::cls_id)
      .def_property_readonly("sep_id", &data::BertTokenizer::sep_id)
      .def_property_readonly("unk_id", &data::BertTokenizer::unk_id)
      .def_property_readonly("mask_id", &data::BertTokenizer::mask_id)
      .def_property_readonly("model_max_length", [](const data::BertTokenizer& t) { return t.config().model_max_length; });

  py::class_<PyModel>(m, "Model")
      .def(py::init<const std::string&, const std::string&, int, std::vector<std::string>, bool>(), py::arg("directory"),
           py::arg("precision") = "fp32", py::arg("threads") = 0, py::arg("no_fuse") = std::vector<std::string>{},
           py::arg("encoder_only") = false)
      .def("__call__", &PyModel::call, py::arg("input_ids"), py::arg("token_type_ids") = py::none(),
           py::arg("attention_mask") = py::none())
      .def_property_readonly("heads", &PyModel::heads)
      .def_property_readonly("notes", &PyModel::notes)
      .def_property_readonly("config", [](const PyModel& p) { return config_to_json(p.config()).dump(); });

  m.def("command_options", &command_options, py::arg("command"));
  m.def("run_command", &run_command, py::arg("args"), py::arg("on_step") = py::none(), py::arg("echo") = false,
        py::arg("json_path") = "");
}
