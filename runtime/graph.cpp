#include "runtime/graph.h"

#include <algorithm>
#include <numeric>

#include "runtime/error.h"

namespace bertlab {

int64_t numel(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

namespace {

template <typename E, size_t N>
const char* name_of(E e, const std::array<const char*, N>& names) {
  auto i = static_cast<size_t>(e);
  return i < N ? names[i] : "?";
}

constexpr std::array<const char*, 4> kDTypeNames{"f32", "bf16", "i32", "i8"};
constexpr std::array<const char*, 3> kLayoutNames{"plain", "blocked", "tile_major"};
constexpr std::array<const char*, 6> kRoleNames{"input",    "weight",          "activation",
                                                "gradient", "optimizer_state", "workspace"};
constexpr std::array<const char*, 4> kPhaseNames{"forward", "backward", "optimizer",
                                                 "communication"};
constexpr std::array<const char*, 3> kCategoryNames{"gemm", "memory_bound", "communication"};
constexpr std::array<const char*, 11> kOpNames{
    "embedding", "mask_bias", "linear", "attn_scores", "softmax",    "attn_context",
    "add",       "layernorm", "gelu",   "tanh",        "first_token"};

template <typename E, size_t N>
E parse_enum(const std::string& s, const std::array<const char*, N>& names, const char* what) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) return static_cast<E>(i);
  fail("unknown {} '{}' (expected one of: {})", what, s, fmt::join(names, ", "));
}

// FLOPs per output element of the memory-bound ops (documented in docs/graph-format.md).
constexpr double kSoftmaxFlopsPerElem = 5;    // max, subtract, exp, sum, divide
constexpr double kLayernormFlopsPerElem = 7;  // sum, subtract, square, sum, scale, gamma, beta
constexpr double kGeluFlopsPerElem = 5;       // scale, erf, add one, half, multiply
constexpr double kTanhFlopsPerElem = 1;

double activation_flops(const std::string& act) {
  if (act == "gelu") return kGeluFlopsPerElem;
  if (act == "tanh") return kTanhFlopsPerElem;
  return 0;
}

const Shape& in_shape(const Graph& g, const Node& n, size_t i) {
  check(i < n.inputs.size(), "node '{}' ({}) needs input {}, has {}", n.name, to_string(n.kind),
        i, n.inputs.size());
  return g.tensor(n.inputs[i]).shape;
}

void expect_rank(const Node& n, const Shape& s, size_t rank, const char* what) {
  check(s.size() == rank, "node '{}': {} must have rank {}, got shape {}", n.name, what, rank,
        shape_str(s));
}

int heads_of(const Node& n) {
  check(n.attrs.contains("heads"), "node '{}' ({}) lacks attribute 'heads'", n.name,
        to_string(n.kind));
  return n.attrs.at("heads").get<int>();
}

Category category_of(OpKind k) {
  switch (k) {
    case OpKind::linear:
    case OpKind::attn_scores:
    case OpKind::attn_context:
      return Category::gemm;
    default:
      return Category::memory_bound;
  }
}

// Shape inference: returns the shapes and dtypes of the outputs, validating the inputs.
std::vector<std::pair<Shape, DType>> infer_outputs(const Graph& g, const Node& n) {
  auto same = [&](size_t i) { return std::vector{std::pair{in_shape(g, n, i), DType::f32}}; };
  switch (n.kind) {
    case OpKind::embedding: {
      const auto& ids = in_shape(g, n, 0);
      expect_rank(n, ids, 2, "input_ids");
      check(in_shape(g, n, 1) == ids, "node '{}': token_type_ids shape {} differs from input_ids {}",
            n.name, shape_str(in_shape(g, n, 1)), shape_str(ids));
      const auto& word = in_shape(g, n, 2);
      const auto& pos = in_shape(g, n, 3);
      const auto& type = in_shape(g, n, 4);
      expect_rank(n, word, 2, "word embeddings");
      check(pos.size() == 2 && type.size() == 2 && pos[1] == word[1] && type[1] == word[1],
            "node '{}': embedding tables disagree on hidden size: word {}, position {}, type {}",
            n.name, shape_str(word), shape_str(pos), shape_str(type));
      check(ids[1] <= pos[0], "node '{}': sequence length {} exceeds max_position_embeddings {}",
            n.name, ids[1], pos[0]);
      return {{{ids[0], ids[1], word[1]}, DType::f32}};
    }
    case OpKind::mask_bias:
      expect_rank(n, in_shape(g, n, 0), 2, "attention_mask");
      return same(0);
    case OpKind::linear: {
      const auto& x = in_shape(g, n, 0);
      const auto& w = in_shape(g, n, 1);
      const auto& b = in_shape(g, n, 2);
      expect_rank(n, w, 2, "weight");
      check(!x.empty() && x.back() == w[1], "node '{}': input {} does not match weight {} (N x K)",
            n.name, shape_str(x), shape_str(w));
      check(b == Shape{w[0]}, "node '{}': bias {} does not match weight {}", n.name, shape_str(b),
            shape_str(w));
      Shape y = x;
      y.back() = w[0];
      if (n.inputs.size() > 3)
        check(in_shape(g, n, 3) == y, "node '{}': residual {} does not match output {}", n.name,
              shape_str(in_shape(g, n, 3)), shape_str(y));
      return {{y, DType::f32}};
    }
    case OpKind::attn_scores: {
      const auto& qkv = in_shape(g, n, 0);
      expect_rank(n, qkv, 3, "qkv");
      int heads = heads_of(n);
      check(qkv[2] % (3 * heads) == 0, "node '{}': qkv width {} is not 3 x heads ({}) x head size",
            n.name, qkv[2], heads);
      check(in_shape(g, n, 1) == Shape{qkv[0], qkv[1]}, "node '{}': mask bias {} is not [B, S]",
            n.name, shape_str(in_shape(g, n, 1)));
      return {{{qkv[0], heads, qkv[1], qkv[1]}, DType::f32}};
    }
    case OpKind::attn_context: {
      const auto& p = in_shape(g, n, 0);
      const auto& qkv = in_shape(g, n, 1);
      expect_rank(n, p, 4, "probs");
      expect_rank(n, qkv, 3, "qkv");
      check(p[0] == qkv[0] && p[2] == qkv[1] && p[3] == qkv[1] && p[1] == heads_of(n),
            "node '{}': probs {} do not match qkv {}", n.name, shape_str(p), shape_str(qkv));
      return {{{qkv[0], qkv[1], qkv[2] / 3}, DType::f32}};
    }
    case OpKind::add:
      check(in_shape(g, n, 0) == in_shape(g, n, 1), "node '{}': cannot add {} and {}", n.name,
            shape_str(in_shape(g, n, 0)), shape_str(in_shape(g, n, 1)));
      return same(0);
    case OpKind::layernorm: {
      const auto& x = in_shape(g, n, 0);
      check(!x.empty() && in_shape(g, n, 1) == Shape{x.back()} &&
                in_shape(g, n, 2) == Shape{x.back()},
            "node '{}': gamma {} / beta {} do not match input {}", n.name,
            shape_str(in_shape(g, n, 1)), shape_str(in_shape(g, n, 2)), shape_str(x));
      return same(0);
    }
    case OpKind::softmax:
    case OpKind::gelu:
    case OpKind::tanh:
      return same(0);
    case OpKind::first_token: {
      const auto& x = in_shape(g, n, 0);
      expect_rank(n, x, 3, "input");
      return {{{x[0], x[2]}, DType::f32}};
    }
  }
  fail("node '{}': unhandled op kind", n.name);
}

}  // namespace

const char* to_string(DType e) { return name_of(e, kDTypeNames); }
const char* to_string(Layout e) { return name_of(e, kLayoutNames); }
const char* to_string(Role e) { return name_of(e, kRoleNames); }
const char* to_string(Phase e) { return name_of(e, kPhaseNames); }
const char* to_string(Category e) { return name_of(e, kCategoryNames); }
const char* to_string(OpKind e) { return name_of(e, kOpNames); }
DType dtype_from_string(const std::string& s) { return parse_enum<DType>(s, kDTypeNames, "dtype"); }
OpKind op_kind_from_string(const std::string& s) {
  return parse_enum<OpKind>(s, kOpNames, "op kind");
}

int64_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::i8:
      return 1;
  }
  return 0;
}

int Graph::add_tensor(std::string name, Shape shape, DType dtype, Role role, Layout layout) {
  for (auto d : shape) check(d > 0, "tensor '{}': dimensions must be positive, got {}", name, shape_str(shape));
  TensorDesc t;
  t.id = static_cast<int>(tensors_.size());
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.role = role;
  t.layout = layout;
  tensors_.push_back(std::move(t));
  return tensors_.back().id;
}

int Graph::add_node(OpKind kind, std::string name, std::vector<int> inputs, nlohmann::json attrs,
                    Phase phase) {
  Node n;
  n.id = static_cast<int>(nodes_.size());
  n.name = std::move(name);
  n.kind = kind;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.phase = phase;
  n.category = category_of(kind);
  for (int t : n.inputs)
    check(t >= 0 && t < static_cast<int>(tensors_.size()), "node '{}': unknown input tensor {}",
          n.name, t);
  auto outs = infer_outputs(*this, n);
  for (size_t i = 0; i < outs.size(); ++i) {
    std::string tname = outs.size() == 1 ? n.name + ".out" : fmt::format("{}.out{}", n.name, i);
    n.outputs.push_back(add_tensor(tname, outs[i].first, outs[i].second, Role::activation));
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().id;
}

int Graph::append_node(Node n) {
  n.id = static_cast<int>(nodes_.size());
  n.category = category_of(n.kind);
  auto valid = [&](int t) { return t >= 0 && t < static_cast<int>(tensors_.size()); };
  for (int t : n.inputs) check(valid(t), "node '{}': unknown input tensor id {}", n.name, t);
  for (int t : n.outputs) check(valid(t), "node '{}': unknown output tensor id {}", n.name, t);
  auto outs = infer_outputs(*this, n);
  check(outs.size() == n.outputs.size(), "node '{}': expected {} outputs, found {}", n.name,
        outs.size(), n.outputs.size());
  for (size_t i = 0; i < outs.size(); ++i)
    check(tensor(n.outputs[i]).shape == outs[i].first,
          "node '{}': output shape {} given, shape inference gives {}", n.name,
          shape_str(tensor(n.outputs[i]).shape), shape_str(outs[i].first));
  nodes_.push_back(std::move(n));
  return nodes_.back().id;
}

int Graph::apply(OpKind kind, std::string name, std::vector<int> inputs, nlohmann::json attrs) {
  return node(add_node(kind, std::move(name), std::move(inputs), std::move(attrs))).outputs.at(0);
}

std::optional<int> Graph::find_tensor(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t.id;
  return std::nullopt;
}

std::optional<int> Graph::find_node(const std::string& name) const {
  for (const auto& n : nodes_)
    if (n.name == name) return n.id;
  return std::nullopt;
}

int Graph::tensor_id(const std::string& name) const {
  auto id = find_tensor(name);
  check(id.has_value(), "graph has no tensor named '{}'", name);
  return *id;
}

void Graph::mark_output(int tensor, std::string public_name) {
  outputs_.emplace_back(std::move(public_name), tensor);
}

void Graph::compact(const std::vector<bool>& node_dead) {
  std::vector<Node> kept;
  for (auto& n : nodes_)
    if (!node_dead.at(n.id)) kept.push_back(std::move(n));
  std::vector<bool> used(tensors_.size(), false);
  for (const auto& n : kept) {
    for (int t : n.inputs) used[t] = true;
    for (int t : n.outputs) used[t] = true;
  }
  for (const auto& o : outputs_) used[o.second] = true;
  std::vector<int> remap(tensors_.size(), -1);
  std::vector<TensorDesc> tensors;
  for (auto& t : tensors_)
    if (used[t.id]) {
      remap[t.id] = static_cast<int>(tensors.size());
      t.id = remap[t.id];
      tensors.push_back(std::move(t));
    }
  for (auto& n : kept) {
    for (int& t : n.inputs) t = remap[t];
    for (int& t : n.outputs) t = remap[t];
  }
  for (auto& o : outputs_) o.second = remap[o.second];
  for (size_t i = 0; i < kept.size(); ++i) kept[i].id = static_cast<int>(i);
  tensors_ = std::move(tensors);
  nodes_ = std::move(kept);
}

std::optional<GemmShape> node_gemm(const Graph& g, const Node& n) {
  switch (n.kind) {
    case OpKind::linear: {
      const auto& x = g.tensor(n.inputs[0]).shape;
      const auto& w = g.tensor(n.inputs[1]).shape;
      return GemmShape{1, numel(x) / x.back(), w[0], w[1], false, true};
    }
    case OpKind::attn_scores: {
      const auto& qkv = g.tensor(n.inputs[0]).shape;
      int64_t heads = heads_of(n), d = qkv[2] / 3 / heads;
      return GemmShape{qkv[0] * heads, qkv[1], qkv[1], d, false, true};
    }
    case OpKind::attn_context: {
      const auto& qkv = g.tensor(n.inputs[1]).shape;
      int64_t heads = heads_of(n), d = qkv[2] / 3 / heads;
      return GemmShape{qkv[0] * heads, qkv[1], d, qkv[1], false, false};
    }
    default:
      return std::nullopt;
  }
}

double node_flops(const Graph& g, const Node& n) {
  const double out = static_cast<double>(g.tensor(n.outputs.at(0)).numel());
  switch (n.kind) {
    case OpKind::linear: {
      // GEMM, bias add, optional residual add, optional fused activation.
      double f = node_gemm(g, n)->flops() + out;
      if (n.inputs.size() > 3) f += out;
      return f + out * activation_flops(n.attrs.value("activation", "none"));
    }
    case OpKind::attn_scores:
      return node_gemm(g, n)->flops() + 2 * out;  // scale and mask bias
    case OpKind::attn_context:
      return node_gemm(g, n)->flops();
    case OpKind::embedding:
      return 2 * out;  // word + position + type
    case OpKind::mask_bias:
    case OpKind::add:
      return out;
    case OpKind::softmax:
      return kSoftmaxFlopsPerElem * out;
    case OpKind::layernorm:
      return kLayernormFlopsPerElem * out;
    case OpKind::gelu:
      return kGeluFlopsPerElem * out;
    case OpKind::tanh:
      return kTanhFlopsPerElem * out;
    case OpKind::first_token:
      return 0;
  }
  return 0;
}

int64_t node_min_bytes(const Graph& g, const Node& n) {
  int64_t out = 0;
  for (int t : n.outputs) out += g.tensor(t).bytes();
  auto in = [&](size_t i) { return g.tensor(n.inputs[i]).bytes(); };
  switch (n.kind) {
    case OpKind::embedding:
      // ids and type ids, plus one gathered row of each table per token.
      return in(0) + in(1) + 3 * out + out;
    case OpKind::first_token:
      return 2 * out;
    case OpKind::attn_scores:
      return in(0) * 2 / 3 + in(1) + out;  // Q and K thirds of qkv
    case OpKind::attn_context:
      return in(0) + in(1) / 3 + out;  // V third of qkv
    default: {
      int64_t total = out;
      for (size_t i = 0; i < n.inputs.size(); ++i) total += in(i);
      return total;
    }
  }
}

nlohmann::json graph_to_json(const Graph& g) {
  using nlohmann::json;
  json tensors = json::array();
  for (const auto& t : g.tensors())
    tensors.push_back({{"id", t.id},
                       {"name", t.name},
                       {"shape", t.shape},
                       {"dtype", to_string(t.dtype)},
                       {"layout", to_string(t.layout)},
                       {"role", to_string(t.role)},
                       {"bytes", t.bytes()}});
  json nodes = json::array();
  for (const auto& n : g.nodes()) {
    json jn{{"id", n.id},
            {"name", n.name},
            {"op", to_string(n.kind)},
            {"inputs", n.inputs},
            {"outputs", n.outputs},
            {"attrs", n.attrs},
            {"phase", to_string(n.phase)},
            {"category", to_string(n.category)},
            {"flops", node_flops(g, n)},
            {"bytes", node_min_bytes(g, n)}};
    if (auto gm = node_gemm(g, n))
      jn["gemm"] = {{"batch", gm->batch}, {"m", gm->m},           {"n", gm->n},
                    {"k", gm->k},         {"trans_a", gm->trans_a}, {"trans_b", gm->trans_b}};
    nodes.push_back(std::move(jn));
  }
  json outputs = json::object();
  for (const auto& [name, id] : g.outputs()) outputs[name] = id;
  return {{"format", "bertlab-graph"}, {"version", kGraphFormatVersion},
          {"meta", g.meta},            {"tensors", tensors},
          {"nodes", nodes},            {"outputs", outputs}};
}

Graph graph_from_json(const nlohmann::json& j) {
  check(j.is_object() && j.value("format", "") == "bertlab-graph",
        "not a bertlab graph: field 'format' must be \"bertlab-graph\"");
  int version = j.value("version", -1);
  check(version == kGraphFormatVersion, "graph format version {} is not supported (expected {})",
        version, kGraphFormatVersion);
  Graph g;
  try {
    g.meta = j.value("meta", nlohmann::json::object());
    for (const auto& t : j.at("tensors")) {
      std::string role = t.at("role");
      std::string layout = t.value("layout", "plain");
      int id = g.add_tensor(t.at("name"), t.at("shape").get<Shape>(),
                            dtype_from_string(t.at("dtype")),
                            parse_enum<Role>(role, kRoleNames, "tensor role"),
                            parse_enum<Layout>(layout, kLayoutNames, "layout"));
      check(id == t.at("id").get<int>(), "graph tensors must be listed in id order (tensor '{}')",
            t.at("name").get<std::string>());
    }
    for (const auto& jn : j.at("nodes")) {
      Node n;
      n.id = static_cast<int>(g.nodes().size());
      n.name = jn.at("name");
      n.kind = op_kind_from_string(jn.at("op"));
      n.inputs = jn.at("inputs").get<std::vector<int>>();
      n.outputs = jn.at("outputs").get<std::vector<int>>();
      n.attrs = jn.value("attrs", nlohmann::json::object());
      n.phase = parse_enum<Phase>(jn.value("phase", "forward"), kPhaseNames, "phase");
      n.category = category_of(n.kind);
      g.append_node(std::move(n));
    }
    const auto outputs = j.value("outputs", nlohmann::json::object());
    for (auto it = outputs.begin(); it != outputs.end(); ++it)
      g.mark_output(it.value().get<int>(), it.key());
  } catch (const nlohmann::json::exception& e) {
    fail("malformed graph JSON: {}", e.what());
  }
  return g;
}

}  // namespace bertlab
