#include "runtime/graph.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "base/error.h"
#include "base/json_integer.h"
#include "runtime/op_rules.h"

namespace bertlab {

int64_t numel(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

namespace {

// The integers of graph JSON (shapes, ids), their kind and range checked first (json_integer_in).
int64_t graph_integer(const nlohmann::json& v, std::string_view what, int64_t lo, int64_t hi) {
  check(json_integer_in(v, lo, hi),
        "malformed graph JSON: {} must be an integer in [{}, {}], got {}", what, lo, hi, v.dump().substr(0, 80));
  return v.get<int64_t>();
}

int graph_id(const nlohmann::json& v, std::string_view what) {
  return static_cast<int>(graph_integer(v, what, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
}

template <typename T>
std::vector<T> graph_integers(const nlohmann::json& v, std::string_view what) {
  check(v.is_array(), "malformed graph JSON: {} must be an array of integers, got {}", what, v.dump().substr(0, 80));
  std::vector<T> out;
  out.reserve(v.size());
  for (const auto& x : v)
    out.push_back(static_cast<T>(graph_integer(x, what, std::numeric_limits<T>::min(), std::numeric_limits<T>::max())));
  return out;
}

// Graph files written before activations were one kind name the activation in the op.
std::optional<std::pair<OpKind, const char*>> legacy_activation_op(const std::string& s) {
  for (const char* act : {"gelu", "tanh"}) {
    if (s == act) return std::pair{OpKind::activation, act};
    if (s == std::string(act) + "_grad") return std::pair{OpKind::activation_grad, act};
  }
  return std::nullopt;
}
}  // namespace

OpKind op_kind_from_string(const std::string& s) {
  if (auto legacy = legacy_activation_op(s)) return legacy->first;
  return enum_from_string<OpKind>(s, "op");
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
  // The element count and the byte size (8 bytes at most per element) must be int64_t values.
  int64_t elements = 1;
  for (auto d : shape)
    check(!__builtin_mul_overflow(elements, d, &elements) && elements <= (int64_t{1} << 60),
          "tensor '{}': shape {} has more than 2^60 elements", name, shape_str(shape));
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
  n.category = op_info(kind).category;
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
  n.category = op_info(n.kind).category;
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

nlohmann::json graph_to_json(const Graph& g) {
  using nlohmann::json;
  json tensors = json::array();
  for (const auto& t : g.tensors()) {
    json jt{{"id", t.id},
            {"name", t.name},
            {"shape", t.shape},
            {"dtype", to_string(t.dtype)},
            {"layout", to_string(t.layout)},
            {"role", to_string(t.role)},
            {"bytes", t.bytes()}};
    if (!t.attrs.empty()) jt["attrs"] = t.attrs;
    tensors.push_back(std::move(jt));
  }
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
  check(j.is_object() && j.contains("format") && j["format"] == "bertlab-graph",
        "not a bertlab graph: field 'format' must be \"bertlab-graph\"");
  const int version = j.contains("version") ? graph_id(j["version"], "'version'") : -1;
  check(version == kGraphFormatVersion, "graph format version {} is not supported (expected {})",
        version, kGraphFormatVersion);
  Graph g;
  try {
    g.meta = j.value("meta", nlohmann::json::object());
    for (const auto& t : j.at("tensors")) {
      std::string role = t.at("role");
      std::string layout = t.value("layout", "plain");
      int id = g.add_tensor(t.at("name"), graph_integers<int64_t>(t.at("shape"), "a tensor's 'shape'"),
                            enum_from_string<DType>(t.at("dtype").get<std::string>(), "dtype"),
                            enum_from_string<Role>(role, "role"),
                            enum_from_string<Layout>(layout, "layout"));
      check(id == graph_id(t.at("id"), "a tensor's 'id'"), "graph tensors must be listed in id order (tensor '{}')",
            t.at("name").get<std::string>());
      g.tensor(id).attrs = t.value("attrs", nlohmann::json::object());
    }
    for (const auto& jn : j.at("nodes")) {
      Node n;
      n.id = static_cast<int>(g.nodes().size());
      n.name = jn.at("name");
      n.kind = op_kind_from_string(jn.at("op"));
      n.inputs = graph_integers<int>(jn.at("inputs"), "a node's 'inputs'");
      n.outputs = graph_integers<int>(jn.at("outputs"), "a node's 'outputs'");
      n.attrs = jn.value("attrs", nlohmann::json::object());
      if (auto legacy = legacy_activation_op(jn.at("op")); legacy && !n.attrs.contains("activation"))
        n.attrs["activation"] = legacy->second;
      n.phase = enum_from_string<Phase>(jn.value("phase", "forward"), "phase");
      n.category = op_info(n.kind).category;
      g.append_node(std::move(n));
    }
    const auto outputs = j.value("outputs", nlohmann::json::object());
    for (auto it = outputs.begin(); it != outputs.end(); ++it)
      g.mark_output(graph_id(it.value(), "an output's tensor id"), it.key());
  } catch (const nlohmann::json::exception& e) {
    fail("malformed graph JSON: {}", e.what());
  }
  return g;
}

}  // namespace bertlab
