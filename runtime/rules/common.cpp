#include "runtime/rules/common.h"

#include "base/error.h"

namespace bertlab::rules {

const TensorDesc& in_t(const Graph& g, const Node& n, size_t i) {
  check(i < n.inputs.size(), "node '{}' ({}) needs input {}, has {}", n.name, to_string(n.kind),
        i, n.inputs.size());
  return g.tensor(n.inputs[i]);
}

void expect_rank(const Node& n, const Shape& s, size_t rank, const char* what) {
  check(s.size() == rank, "node '{}': {} must have rank {}, got shape {}", n.name, what, rank,
        shape_str(s));
}

int64_t int_attr(const Node& n, const char* key) {
  check(n.attrs.contains(key), "node '{}' ({}) lacks attribute '{}'", n.name, to_string(n.kind), key);
  return n.attrs.at(key).get<int64_t>();
}

int64_t head_size(const Node& n, const Shape& qkv) {
  int64_t heads = int_attr(n, "heads");
  expect_rank(n, qkv, 3, "qkv");
  check(heads > 0 && qkv[2] % (3 * heads) == 0,
        "node '{}': qkv width {} is not 3 x heads ({}) x head size", n.name, qkv[2], heads);
  return qkv[2] / 3 / heads;
}

OutputTypes f32(std::initializer_list<Shape> shapes) {
  OutputTypes o;
  for (const auto& s : shapes) o.emplace_back(s, DType::f32);
  return o;
}

double out0_numel(const Graph& g, const Node& n) { return static_cast<double>(g.tensor(n.outputs.at(0)).numel()); }
double in0_numel(const Graph& g, const Node& n) { return static_cast<double>(in_t(g, n, 0).numel()); }

OutputTypes same_as_input0(const Graph& g, const Node& n) { return f32({in_shape(g, n, 0)}); }

OutputTypes gradient_like_input1(const Graph& g, const Node& n) {
  check(in_shape(g, n, 0) == in_shape(g, n, 1), "node '{}': gradient {} does not match {}", n.name,
        shape_str(in_shape(g, n, 0)), shape_str(in_shape(g, n, 1)));
  return same_as_input0(g, n);
}

double flops_per_input0(const Graph& g, const Node& n) { return in0_numel(g, n); }
double no_flops(const Graph&, const Node&) { return 0; }

int64_t io_bytes(const Graph& g, const Node& n) {
  int64_t total = 0;
  for (int t : n.inputs) total += g.tensor(t).bytes();
  for (int t : n.outputs) total += g.tensor(t).bytes();
  return total;
}

}  // namespace bertlab::rules
