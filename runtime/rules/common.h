#pragma once
// What the rules files of the op families (runtime/rules/<family>.cpp) share: reading and
// checking a node's inputs and attributes, and the rules several families use as they are.
#include <cstdint>
#include <initializer_list>

#include "runtime/op_rules.h"

namespace bertlab::rules {

// Input i of node n; throws Error naming the node when it has fewer inputs.
const TensorDesc& in_t(const Graph& g, const Node& n, size_t i);
inline const Shape& in_shape(const Graph& g, const Node& n, size_t i) { return in_t(g, n, i).shape; }
void expect_rank(const Node& n, const Shape& s, size_t rank, const char* what);
// An integer attribute; throws Error naming the node when it lacks it.
int64_t int_attr(const Node& n, const char* key);
// qkv (B,S,3H) with the node's `heads` heads: returns d, checking the width.
int64_t head_size(const Node& n, const Shape& qkv);

// f32 outputs of the given shapes.
OutputTypes f32(std::initializer_list<Shape> shapes);

// Bytes of input i, of output i.
inline int64_t in_bytes(const Graph& g, const Node& n, size_t i) { return g.tensor(n.inputs.at(i)).bytes(); }
inline int64_t out_bytes(const Graph& g, const Node& n, size_t i) { return g.tensor(n.outputs.at(i)).bytes(); }
// Elements of output 0, of input 0.
double out0_numel(const Graph& g, const Node& n);
double in0_numel(const Graph& g, const Node& n);

// Rules shared by several kinds.
OutputTypes same_as_input0(const Graph& g, const Node& n);  // one f32 output shaped like input 0
// dy, and x or y of the same shape -> dx shaped like dy (the element-wise and row gradients).
OutputTypes gradient_like_input1(const Graph& g, const Node& n);
double flops_per_input0(const Graph& g, const Node& n);     // one FLOP per element of input 0
double no_flops(const Graph& g, const Node& n);
int64_t io_bytes(const Graph& g, const Node& n);            // every input read once, every output written once

}  // namespace bertlab::rules
