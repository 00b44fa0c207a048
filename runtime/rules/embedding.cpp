// The rules of the row gathers (kernels in ops/embedding.h, first_token_forward in
// ops/elementwise.h): the embeddings, the [CLS] row, the masked positions, and their gradients.
#include "ops/elementwise.h"
#include "ops/embedding.h"

#include "base/error.h"
#include "runtime/differentiator.h"
#include "runtime/rules/common.h"
#include "runtime/step_binder.h"

namespace bertlab::rules::embedding {

namespace {


// embedding: ids(B,S) i32, type_ids(B,S) i32, word(V,H), pos(P,H), type(T,H) -> (B,S,H)
OutputTypes embedding_outputs(const Graph& g, const Node& n) {
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
  return f32({{ids[0], ids[1], word[1]}});
}
double embedding_flops(const Graph& g, const Node& n) { return 2 * out0_numel(g, n); }  // word + position + type
int64_t embedding_bytes(const Graph& g, const Node& n) {
  // ids, one gathered row per table, output
  return in_bytes(g, n, 0) + in_bytes(g, n, 1) + 3 * out_bytes(g, n, 0) + out_bytes(g, n, 0);
}
void embedding_backward(Differentiator& d, const Node& n, int dy) {
  const auto& in = n.inputs;
  const Graph& g = d.graph();
  d.emit(OpKind::embedding_grad, n.name + ".grad", {dy, in[0], in[1]},
         {d.param_grad(in[2]), d.param_grad(in[3]), d.param_grad(in[4])},
         {{"vocab", g.tensor(in[2]).shape[0]},
          {"positions", g.tensor(in[3]).shape[0]},
          {"types", g.tensor(in[4]).shape[0]}});
}
std::function<void()> embedding_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto s = b.shape(n, 0);
  int64_t H = b.shape(n, 2)[1];
  const int32_t *ids = b.ids(n, 0), *types = b.ids(n, 1);
  const float *word = b.in(n, 2), *pos = b.in(n, 3), *type = b.in(n, 4);
  return [=] { ops::embedding_forward(out, ids, types, word, pos, type, s[0], s[1], H); };
}

// embedding_grad: dout(B,S,H), ids, type_ids -> dword +=, dpos +=, dtype +=
OutputTypes embedding_grad_outputs(const Graph& g, const Node& n) {
  const auto& d = in_shape(g, n, 0);
  expect_rank(n, d, 3, "gradient");
  return f32({{int_attr(n, "vocab"), d[2]}, {int_attr(n, "positions"), d[2]}, {int_attr(n, "types"), d[2]}});
}
double embedding_grad_flops(const Graph& g, const Node& n) { return 3 * in0_numel(g, n); }  // three scatter-adds per element
int64_t embedding_grad_bytes(const Graph& g, const Node& n) {
  // ids, type ids, the gradient, and a read-modify-write of one row per table per token.
  return in_bytes(g, n, 0) + in_bytes(g, n, 1) + in_bytes(g, n, 2) + 6 * in_bytes(g, n, 0);
}
std::function<void()> embedding_grad_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto s = b.shape(n, 0);
  const float* dy = b.in(n, 0);
  const int32_t *ids = b.ids(n, 1), *types = b.ids(n, 2);
  float *dpos = b.out(n, 1), *dtype = b.out(n, 2);
  // Data parallel with overlap: the word rows go to the gradient sync's compact table while
  // the table's bucket is in flight (runtime/grad_sync.h); made by the allreduce node, later.
  const std::unique_ptr<GradientSync>* sync = b.sync();
  const int64_t node = n.id;
  return [=] {
    GradientSync* gs = sync->get();
    if (gs && gs->defers_rows(node)) {
      const auto rows = gs->rows_for(node, ids, s[0] * s[1]);
      ops::embedding_backward(rows.table, dpos, dtype, dy, rows.ids, types, s[0], s[1], s[2]);
      return;
    }
    ops::embedding_backward(out, dpos, dtype, dy, ids, types, s[0], s[1], s[2]);
  };
}

// The gradients of the row gathers: the gathered rows' gradient scattered into zeros.
int64_t scatter_bytes(const Graph& g, const Node& n) {  // zero fill and scatter
  return in_bytes(g, n, 0) + (n.inputs.size() > 1 ? in_bytes(g, n, 1) : 0) + out_bytes(g, n, 0);
}

// first_token: x(B,S,H) -> (B,H), the [CLS] row of each sequence
OutputTypes first_token_outputs(const Graph& g, const Node& n) {
  const auto& x = in_shape(g, n, 0);
  expect_rank(n, x, 3, "input");
  return f32({{x[0], x[2]}});
}
int64_t first_token_bytes(const Graph& g, const Node& n) { return 2 * out_bytes(g, n, 0); }  // read, then written
void first_token_backward(Differentiator& d, const Node& n, int dy) {
  int64_t seq = d.graph().tensor(n.inputs[0]).shape[1];
  d.contribute(n.inputs[0], d.emit1(OpKind::first_token_grad, n.name + ".grad", {dy}, {{"seq", seq}}));
}
std::function<void()> first_token_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto s = b.shape(n, 0);
  const float* x = b.in(n, 0);
  return [=] { ops::first_token_forward(out, x, s[0], s[1], s[2]); };
}

// first_token_grad: dy(B,H) -> dx(B,S,H), zero but the first row; attr seq
OutputTypes first_token_grad_outputs(const Graph& g, const Node& n) {
  const auto& dy = in_shape(g, n, 0);
  expect_rank(n, dy, 2, "gradient");
  return f32({{dy[0], int_attr(n, "seq"), dy[1]}});
}
std::function<void()> first_token_grad_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto s = b.shape(n, 0);
  const float* dy = b.in(n, 0);
  const int64_t S = n.attrs.at("seq");
  return [=] { ops::first_token_backward(out, dy, s[0], S, s[1]); };
}

// gather_rows: x(B,S,H), positions(B,P) i32 -> (B*P,H)
OutputTypes gather_rows_outputs(const Graph& g, const Node& n) {
  const auto& x = in_shape(g, n, 0);
  const auto& pos = in_shape(g, n, 1);
  expect_rank(n, x, 3, "input");
  expect_rank(n, pos, 2, "positions");
  check(pos[0] == x[0], "node '{}': positions {} do not match input {}", n.name, shape_str(pos), shape_str(x));
  return f32({{pos[0] * pos[1], x[2]}});
}
int64_t gather_rows_bytes(const Graph& g, const Node& n) {  // positions, the gathered rows read, then written
  return in_bytes(g, n, 1) + 2 * out_bytes(g, n, 0);
}
void gather_rows_backward(Differentiator& d, const Node& n, int dy) {
  int64_t seq = d.graph().tensor(n.inputs[0]).shape[1];
  d.contribute(n.inputs[0], d.emit1(OpKind::gather_rows_grad, n.name + ".grad", {dy, n.inputs[1]}, {{"seq", seq}}));
}
std::function<void()> gather_rows_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto s = b.shape(n, 0), pos = b.shape(n, 1);
  const float* x = b.in(n, 0);
  const int32_t* positions = b.ids(n, 1);
  return [=] { ops::gather_rows_forward(out, x, positions, s[0], s[1], pos[1], s[2]); };
}

// gather_rows_grad: dy(B*P,H), positions(B,P) -> dx(B,S,H), zero elsewhere; attr seq
OutputTypes gather_rows_grad_outputs(const Graph& g, const Node& n) {
  const auto& dy = in_shape(g, n, 0);
  const auto& pos = in_shape(g, n, 1);
  expect_rank(n, dy, 2, "gradient");
  check(dy[0] == numel(pos), "node '{}': gradient {} does not match positions {}", n.name, shape_str(dy),
        shape_str(pos));
  return f32({{pos[0], int_attr(n, "seq"), dy[1]}});
}
std::function<void()> gather_rows_grad_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto dy_s = b.shape(n, 0), pos = b.shape(n, 1);
  const float* dy = b.in(n, 0);
  const int32_t* positions = b.ids(n, 1);
  const int64_t S = n.attrs.at("seq");
  return [=] { ops::gather_rows_backward(out, dy, positions, pos[0], S, pos[1], dy_s[1]); };
}

}  // namespace

const OpRules embedding{embedding_outputs, embedding_flops, embedding_bytes, nullptr, embedding_backward,
                        embedding_kernel};
const OpRules embedding_grad{embedding_grad_outputs, embedding_grad_flops, embedding_grad_bytes, nullptr, nullptr,
                             embedding_grad_kernel};
const OpRules first_token{first_token_outputs, no_flops, first_token_bytes, nullptr, first_token_backward,
                          first_token_kernel};
const OpRules first_token_grad{first_token_grad_outputs, flops_per_input0, scatter_bytes, nullptr, nullptr,
                               first_token_grad_kernel};
const OpRules gather_rows{gather_rows_outputs, no_flops, gather_rows_bytes, nullptr, gather_rows_backward,
                          gather_rows_kernel};
const OpRules gather_rows_grad{gather_rows_grad_outputs, flops_per_input0, scatter_bytes, nullptr, nullptr,
                               gather_rows_grad_kernel};

}  // namespace bertlab::rules::embedding
