#pragma once
// The op graph: the contract between the executor, the profiler, hwmodel and the exporters.
// Every node declares shape inference, FLOPs and the minimal bytes it must move, so each of
// them sees the same list of nodes with the same costs.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/op_table.h"
#include "runtime/precision.h"

namespace bertlab {

using Shape = std::vector<int64_t>;
int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);

#define BERTLAB_DTYPES(X) X(f32, "f32") X(bf16, "bf16") X(i32, "i32") X(i8, "i8")
BERTLAB_ENUM(DType, uint8_t, BERTLAB_DTYPES)
#define BERTLAB_LAYOUTS(X) X(plain, "plain")  // every tensor the graph describes is a plain array
BERTLAB_ENUM(Layout, uint8_t, BERTLAB_LAYOUTS)
#define BERTLAB_ROLES(X) \
  X(input, "input") X(weight, "weight") X(activation, "activation") X(gradient, "gradient") X(optimizer_state, "optimizer_state")
BERTLAB_ENUM(Role, uint8_t, BERTLAB_ROLES)

OpKind op_kind_from_string(const std::string&);  // also the names of graph files before
                                                 // activations were one kind (gelu, tanh_grad)
int64_t dtype_size(DType);

struct TensorDesc {
  int id = -1;
  std::string name;  // hierarchical, e.g. encoder.3.attention.qkv.out or a HF weight name
  Shape shape;
  DType dtype = DType::f32;
  Layout layout = Layout::plain;
  Role role = Role::activation;
  // Facts a builder states for generic passes, serialised as they are: "decay" (false: no
  // weight decay), "segments" (LAMB trust ratios of a fused parameter), "region".
  nlohmann::json attrs = nlohmann::json::object();
  int64_t numel() const { return bertlab::numel(shape); }
  int64_t bytes() const { return numel() * dtype_size(dtype); }
};

// What a GEMM computes, in the terms of the layer it belongs to: hwmodel lowers and prices a GEMM
// by its role (switching over this, not over OpKind), so a new op kind whose GEMM plays an
// existing role needs nothing there.
enum class GemmRole : uint8_t {
  dense,               // y(M,N) = x(M,K) w^T: a linear layer
  dense_grad_input,    // dx(M,K) = dy(M,N) w(N,K)
  dense_grad_weight,   // dw(N,K) = dy^T(N,M) x(M,K), and the bias gradient
  scores,              // per head, S(L,L) = Q(L,d) K^T: the operands are thirds of qkv
  context,             // per head, ctx(L,d) = P(L,L) V(L,d)
  scores_grad_q,       // dQ = dS K
  scores_grad_k,       // dK = dS^T Q
  context_grad_probs,  // dP = dctx V^T
  context_grad_v,      // dV = P^T dctx
};

// The GEMM a node performs: batch independent products (M x K) * (K x N).
// trans_b: the B operand is stored N x K (as HF linear weights and K^T in attention are).
struct GemmShape {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  GemmRole role = GemmRole::dense;
  double flops() const { return 2.0 * batch * m * n * k; }
};

struct Node {
  int id = -1;
  std::string name;  // hierarchical, e.g. encoder.3.attention.qkv
  OpKind kind{};
  std::vector<int> inputs, outputs;  // tensor ids
  // Per-kind attributes (docs/graph-format.md) and builder facts: "region" (attention | ffn)
  // for hwmodel's per-region totals, "loss" (mlm | nsp | classifier, op_rules.h LossKind) on cross-entropy nodes.
  nlohmann::json attrs = nlohmann::json::object();
  Phase phase = Phase::forward;
  Category category = Category::memory_bound;
};

// A forward node re-run in the backward instead of keeping its output (attribute "recomputed",
// set by runtime/autodiff.cpp): extra work, not model FLOPs.
inline constexpr const char* kRecomputedAttr = "recomputed";
inline bool is_recomputation(const Node& n) {
  const auto it = n.attrs.find(kRecomputedAttr);
  return it != n.attrs.end() && it->is_boolean() && it->get<bool>();
}

class Graph {
 public:
  int add_tensor(std::string name, Shape shape, DType dtype, Role role,
                 Layout layout = Layout::plain);
  // Adds a node, infers the shapes of its outputs and creates them as activations named
  // "<node name>.out". Returns the node id.
  int add_node(OpKind kind, std::string name, std::vector<int> inputs,
               nlohmann::json attrs = nlohmann::json::object(), Phase phase = Phase::forward);
  // Appends a node whose outputs already exist (graph files, nodes writing part of an existing
  // tensor); re-checks its shapes.
  int append_node(Node n);
  // Convenience: adds a node and returns its single output tensor id.
  int apply(OpKind kind, std::string name, std::vector<int> inputs,
            nlohmann::json attrs = nlohmann::json::object());

  const TensorDesc& tensor(int id) const { return tensors_.at(id); }
  TensorDesc& tensor(int id) { return tensors_.at(id); }
  const Node& node(int id) const { return nodes_.at(id); }
  Node& node(int id) { return nodes_.at(id); }
  const std::vector<TensorDesc>& tensors() const { return tensors_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::optional<int> find_tensor(const std::string& name) const;
  std::optional<int> find_node(const std::string& name) const;
  int tensor_id(const std::string& name) const;  // throws Error naming the tensor

  // Marks a tensor as a graph output (kept alive to the end, returned to the caller).
  void mark_output(int tensor, std::string public_name);
  const std::vector<std::pair<std::string, int>>& outputs() const { return outputs_; }

  // Removes nodes flagged dead and tensors no node or output uses; renumbers ids.
  void compact(const std::vector<bool>& node_dead);

  nlohmann::json meta = nlohmann::json::object();  // config and run spec, serialised as is

 private:
  std::vector<TensorDesc> tensors_;
  std::vector<Node> nodes_;
  std::vector<std::pair<std::string, int>> outputs_;
};

// Per-op-kind costs, shared by the profiler and hwmodel.
double node_flops(const Graph& g, const Node& n);
// Minimal bytes: each input read once and each output written once, except where an op
// touches only part of an input (embedding rows gathered, first_token rows).
int64_t node_min_bytes(const Graph& g, const Node& n);
// The GEMM of a gemm-category node; nullopt for other nodes.
std::optional<GemmShape> node_gemm(const Graph& g, const Node& n);
// GEMM input precision. A GEMM node with attrs "precision": "bf16" multiplies bf16 copies of
// its f32 inputs, accumulating and writing in f32 (mixed precision as in PyTorch's autocast);
// without the attribute (or "fp32") it runs in f32. Throws on another value.
Precision gemm_precision(const Node& n);
inline bool gemm_bf16(const Node& n) { return gemm_precision(n) == Precision::bf16; }
// Sets the precision of every GEMM node of g, forward and backward.
void set_gemm_precision(Graph& g, Precision precision);

// JSON with a "format" and "version" field; see docs/graph-format.md.
inline constexpr int kGraphFormatVersion = 1;
nlohmann::json graph_to_json(const Graph& g);
Graph graph_from_json(const nlohmann::json& j);  // throws Error on another version

}  // namespace bertlab
