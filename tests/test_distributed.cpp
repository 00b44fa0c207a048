// Data parallelism over MPI: the gradient allreduce node of the training graph, and two ranks
// training with half the batch each against one process with the whole batch.
#include <catch2/catch.hpp>

#include <fstream>
#include <random>

#include "hwmodel/estimate.h"
#include "ops/embedding.h"
#include "runtime/bert_builder.h"
#include "runtime/autodiff.h"
#include "runtime/distributed.h"
#include "runtime/executor.h"
#include "runtime/grad_sync.h"
#include "runtime/profiler.h"
#include "runtime/safetensors.h"
#include "runtime/trainer.h"
#include "test_configs.h"
#include "test_util.h"

using namespace bertlab;
using namespace bertlab::testing;
using Catch::Matchers::Contains;

namespace {

BertConfig small_config() {
  BertConfig c = small_train_config();
  // No dropout: one rank's masks cannot equal those of one process with the whole batch.
  c.hidden_dropout_prob = 0;
  c.attention_probs_dropout_prob = 0;
  return c;
}

// The buckets, sorted by position, tile the gradient arena without gaps (returned sorted), and
// their start order is readiness order.
std::vector<GradBucket> check_partition(const std::vector<GradBucket>& buckets, const ParamStore& grads) {
  REQUIRE(!buckets.empty());
  auto by_pos = buckets;
  std::sort(by_pos.begin(), by_pos.end(), [](const GradBucket& a, const GradBucket& b) { return a.begin < b.begin; });
  CHECK(by_pos.front().begin == 0);
  CHECK(by_pos.back().end == grads.arena_size());
  for (size_t k = 1; k < by_pos.size(); ++k) CHECK(by_pos[k].begin == by_pos[k - 1].end);
  for (size_t k = 1; k < buckets.size(); ++k) CHECK(buckets[k - 1].ready_node <= buckets[k].ready_node);
  return by_pos;
}

// A 2-rank training graph of the small model, its parameters and training state.
struct SmallTraining {
  Graph g;
  Model model;
  TrainingState state;
  SmallTraining()
      : g(build_bert(small_config(), [] {
          RunSpec r;
          r.batch = 2, r.seq = 8, r.mode = RunMode::train, r.world_size = 2;
          return r;
        }())),
        model(init_model(small_config(), Heads::pretraining, 1)),
        state(model.params) {}
};

// step -> loss from metrics.jsonl
std::map<int, double> losses(const fs::path& file) {
  std::map<int, double> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out[j["step"].get<int>()] = j["loss"].get<double>();
  }
  return out;
}

}  // namespace

TEST_CASE("A data-parallel training graph sums the gradients before the optimizer", "[distributed]") {
  RunSpec r;
  r.batch = 2, r.seq = 8, r.mode = RunMode::train, r.world_size = 4;
  Graph g = build_bert(small_config(), r);
  int allreduce = -1, first_optimizer = -1, last_backward = -1, gradients = 0;
  for (const auto& n : g.nodes()) {
    if (n.kind == OpKind::allreduce) allreduce = n.id;
    if (n.phase == Phase::optimizer && first_optimizer < 0) first_optimizer = n.id;
    if (n.phase == Phase::backward) last_backward = n.id;
  }
  for (const auto& t : g.tensors()) gradients += t.role == Role::gradient;
  REQUIRE(allreduce >= 0);
  const Node& n = g.node(allreduce);
  CHECK(n.phase == Phase::communication);
  CHECK(n.category == Category::communication);
  CHECK(profile_category_of(n.kind) == ProfileCategory::communication);
  CHECK(last_backward < allreduce);
  CHECK(allreduce < first_optimizer);
  CHECK(static_cast<int>(n.inputs.size()) == gradients);
  CHECK(n.outputs == n.inputs);  // in place
  // A ring allreduce adds (W-1)/W of the elements on each rank.
  double elements = 0;
  for (int t : n.inputs) elements += double(g.tensor(t).numel());
  CHECK(node_flops(g, n) == Approx(elements * 3 / 4));
  CHECK(g.meta["run"]["world_size"] == 4);
  // Round trip, and no allreduce for one rank or for inference.
  Graph back = graph_from_json(graph_to_json(g));
  CHECK(back.node(allreduce).kind == OpKind::allreduce);
  r.world_size = 1;
  const Graph single = build_bert(small_config(), r);
  for (const auto& m : single.nodes()) CHECK(m.kind != OpKind::allreduce);
  // hwmodel costs the node as its local memory traffic: every fp32 gradient read and written
  // once (whole 64-byte lines), whatever the accelerator's element size.
  const auto est = hw::estimate_graph(g, hw::load_system((source_dir() / "configs/systems/paper-ticsat.json").string()),
                                      hw::Arrangement::bwma);
  int64_t grad_bytes = 0;
  for (int t : n.inputs) grad_bytes += g.tensor(t).bytes();
  bool costed = false;
  for (const auto& e : est.nodes)
    if (e.name == n.name) {
      costed = true;
      CHECK(e.model == "stream");
      CHECK(e.traffic.dram_bytes() >= 2 * grad_bytes);
      CHECK(e.traffic.dram_bytes() <= 2 * grad_bytes + 2 * 64 * static_cast<int64_t>(n.inputs.size()));
    }
  CHECK(costed);
  // A graph for 4 ranks refuses to run in a world of 1.
  Model model = init_model(small_config(), Heads::pretraining, 1);
  TrainingState state(model.params);
  CHECK_THROWS_WITH(Executor(g, model.params, &state), Contains("4 ranks") && Contains("mpirun -np 4"));
}

TEST_CASE("Gradient buckets partition the arena and start after their gradients' last backward node",
          "[distributed]") {
  SmallTraining t;
  const Graph& g = t.g;
  TrainingState& state = t.state;
  const ParamStore& grads = state.grads;
  // Last forward/backward node touching each gradient, found here independently of the planner.
  std::map<std::string, int64_t> last;
  for (const auto& n : g.nodes()) {
    if (n.phase != Phase::backward && n.phase != Phase::forward) continue;
    for (int t : n.outputs)
      if (g.tensor(t).role == Role::gradient) last[param_of(g.tensor(t).name)] = n.id;
    for (int t : n.inputs)
      if (g.tensor(t).role == Role::gradient) last[param_of(g.tensor(t).name)] = n.id;
  }
  for (int64_t bytes : {int64_t{1}, int64_t{4096}, int64_t{64} << 10, int64_t{1} << 30}) {
    INFO("bucket bytes " << bytes);
    const auto buckets = plan_grad_buckets(g, grads, bytes);
    const auto by_pos = check_partition(buckets, grads);
    // No bucket is ready before any gradient in it is final.
    for (const auto& b : buckets)
      for (const auto& p : grads.params())
        if (p.offset >= b.begin && p.offset < b.end) CHECK(b.ready_node >= last.at(p.name));
    if (bytes == 1) CHECK(buckets.size() == grads.params().size());  // one parameter each
    if (bytes == int64_t{1} << 30) CHECK(buckets.size() == 1);
    if (bytes == 4096) {
      // Buckets fill up to the size before closing: all but the first-laid-out hold >= 4096 bytes.
      for (const auto& b : by_pos)
        if (b.begin > 0) CHECK((b.end - b.begin) * 4 >= 4096);
      // Overlap is possible: the first bucket is ready well before the last backward node.
      CHECK(buckets.front().ready_node < buckets.back().ready_node);
    }
  }
  CHECK_THROWS_WITH(plan_grad_buckets(g, grads, 0), Contains("at least one byte"));

  // Deferred rows: the word-embedding gradient is its own bucket, ready after its last touch
  // other than the embedding backward (the tied decoder's weight gradient, early in backward);
  // every other parameter still waits for its last touch.
  int64_t embedding_grad = -1;
  for (const auto& n : g.nodes())
    if (n.kind == OpKind::embedding_grad) embedding_grad = n.id;
  REQUIRE(embedding_grad >= 0);
  const std::string word = "bert.embeddings.word_embeddings.weight";
  int64_t word_last = -1;  // its last touch, the embedding backward's write left out
  for (const auto& n : g.nodes()) {
    if ((n.phase != Phase::backward && n.phase != Phase::forward) || n.id == embedding_grad) continue;
    for (const auto* list : {&n.inputs, &n.outputs})
      for (int t : *list)
        if (g.tensor(t).role == Role::gradient && param_of(g.tensor(t).name) == word) word_last = n.id;
  }
  REQUIRE(word_last >= 0);
  CHECK(word_last < embedding_grad - 10);  // the decoder's gradient comes long before
  const auto rs = row_sparse_grads(g, grads);
  REQUIRE(rs.size() == 1);
  CHECK(rs[0].param == word);
  CHECK(rs[0].node == embedding_grad);
  CHECK(rs[0].rows == small_config().vocab_size);
  CHECK(rs[0].offset == grads.info(word).offset);
  for (int64_t bytes : {int64_t{1}, int64_t{4096}, int64_t{1} << 30}) {
    INFO("deferred rows, bucket bytes " << bytes);
    const auto buckets = plan_grad_buckets(g, grads, bytes, true);
    check_partition(buckets, grads);
    const ParamInfo& w = grads.info(word);
    int found = 0;
    for (const auto& b : buckets) {
      for (const auto& p : grads.params()) {
        if (p.offset < b.begin || p.offset >= b.end) continue;
        if (p.name != word) {
          CHECK(b.ready_node >= last.at(p.name));
          continue;
        }
        ++found;
        CHECK(b.ready_node == word_last);
        // Alone in its bucket (alignment gaps aside).
        for (const auto& q : grads.params())
          if (q.name != word) CHECK((q.offset < b.begin || q.offset >= b.end));
        CHECK(b.end - b.begin >= w.numel());
      }
    }
    CHECK(found == 1);
  }

  // Driven as the executor drives it (in a world of one the sums themselves are no-ops): armed,
  // each bucket starts right after its ready node; not overlapped, all start at the allreduce.
  for (bool overlap : {true, false}) {
    INFO("overlap " << overlap);
    GradientSync sync(g, state.grads, 4096, overlap, Precision::fp32);
    sync.arm();
    for (const auto& n : g.nodes())
      if (n.phase == Phase::backward) sync.after_node(n.id);
    sync.finish();
    REQUIRE((sync.buckets().size() > 1) == overlap);
    for (size_t b = 0; b < sync.buckets().size(); ++b)
      CHECK(sync.started_after()[b] == (overlap ? sync.buckets()[b].ready_node : GradientSync::kAtFinish));
  }
}

TEST_CASE("Deferred embedding rows: the compact table's rows, added at the allreduce, give the scatter-add's sum",
          "[distributed]") {
  SmallTraining t;
  const Graph& g = t.g;
  ParamStore& grads = t.state.grads;
  const auto rs = row_sparse_grads(g, grads);
  REQUIRE(rs.size() == 1);
  const int64_t V = rs[0].rows, H = rs[0].width, B = 3, S = 5, T = B * S;
  // The gradient as earlier micro-batches and the decoder left it, and this batch's rows.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(V - 1));
  for (int64_t i = 0; i < grads.arena_size(); ++i) grads.arena()[i] = normal(rng);
  std::vector<int32_t> ids(static_cast<size_t>(T)), types(static_cast<size_t>(T), 0);
  for (auto& id : ids) id = token(rng);
  ids[3] = ids[0], ids[9] = ids[0], ids[4] = static_cast<int32_t>(V - 1);  // repeats and the last row
  std::vector<float> dy(static_cast<size_t>(T * H));
  for (auto& v : dy) v = normal(rng);
  // Expected: the reference scatter-add into the arena's table.
  std::vector<float> expected(grads.arena() + rs[0].offset, grads.arena() + rs[0].offset + V * H);
  std::vector<float> pos(static_cast<size_t>(S * H)), type(static_cast<size_t>(2 * H));
  ops::embedding_backward_reference(expected.data(), pos.data(), type.data(), dy.data(), ids.data(), types.data(), B, S, H);

  GradientSync sync(g, grads, 4096, /*overlap=*/true, Precision::fp32);
  CHECK_FALSE(sync.defers_rows(rs[0].node));  // not armed: the arena itself
  sync.arm();
  CHECK(sync.defers_rows(rs[0].node));
  CHECK_FALSE(sync.defers_rows(rs[0].node - 1));
  for (int round = 0; round < 2; ++round) {  // the second step reuses the slot map
    INFO("step " << round);
    if (round == 1) {
      std::copy(expected.begin(), expected.end(), grads.arena() + rs[0].offset);
      ops::embedding_backward_reference(expected.data(), pos.data(), type.data(), dy.data(), ids.data(), types.data(), B, S, H);
      sync.arm();
    }
    for (const auto& n : g.nodes()) {
      if (n.phase != Phase::backward) continue;
      if (n.id == rs[0].node) {
        const auto rows = sync.rows_for(n.id, ids.data(), T);
        std::vector<float> p2(pos.size()), t2(type.size());
        ops::embedding_backward(rows.table, p2.data(), t2.data(), dy.data(), rows.ids, types.data(), B, S, H);
      }
      sync.after_node(n.id);
    }
    sync.finish();  // a world of one: the allgather returns this rank's rows
    CHECK_FALSE(sync.defers_rows(rs[0].node));
    double worst = 0;
    for (int64_t i = 0; i < V * H; ++i)
      worst = std::max(worst, double(std::abs(grads.arena()[rs[0].offset + i] - expected[static_cast<size_t>(i)])));
    CHECK(worst < 1e-5);
  }
  CHECK_THROWS_WITH(sync.rows_for(rs[0].node - 1, ids.data(), T), Contains("no deferred rows"));
  // A bad id is refused before anything changes: the next step still gives the right sum.
  std::vector<int32_t> bad{ids[1], static_cast<int32_t>(V)};
  sync.arm();
  CHECK_THROWS_WITH(sync.rows_for(rs[0].node, bad.data(), 2), Contains("outside"));
  std::copy(expected.begin(), expected.end(), grads.arena() + rs[0].offset);
  ops::embedding_backward_reference(expected.data(), pos.data(), type.data(), dy.data(), ids.data(), types.data(), B, S, H);
  const auto rows = sync.rows_for(rs[0].node, ids.data(), T);
  std::vector<float> p2(pos.size()), t2(type.size());
  ops::embedding_backward(rows.table, p2.data(), t2.data(), dy.data(), rows.ids, types.data(), B, S, H);
  sync.finish();
  double worst = 0;
  for (int64_t i = 0; i < V * H; ++i)
    worst = std::max(worst, double(std::abs(grads.arena()[rs[0].offset + i] - expected[static_cast<size_t>(i)])));
  CHECK(worst < 1e-5);
}

TEST_CASE("Two MPI ranks with half the batch each train like one process with the whole batch",
          "[distributed][train][cli][mpirun]") {
  REQUIRE(run_shell("command -v mpirun").exit_code == 0);  // scripts/setup.sh installs openmpi-bin
  TempDir dir("dist");
  const auto src = source_dir();
  REQUIRE(run_bertlab(fmt::format("vocab --corpus {} --vocab-size 200 --out {}",
                                  quote(src / "tests/data/corpus_small.txt"), quote(dir / "vocab"))).exit_code == 0);
  REQUIRE(run_bertlab(fmt::format("prepare --corpus {} --vocab {} --seq-len 32 --dupe-factor 4 --out {}",
                                  quote(src / "tests/data/corpus_small.txt"), quote(dir / "vocab"),
                                  quote(dir / "data"))).exit_code == 0);
  std::ofstream(dir / "config.json") << config_to_json(small_config()).dump();
  auto args = [&](int batch, const std::string& out) {
    return fmt::format("train --config {} --data {} --batch-size {} --accum-steps 2 --lr 1e-3 --warmup-steps 1 "
                       "--seed 5 --max-steps 4 --log-steps 1 --eval-batches 1 --threads 1 --out {}",
                       quote(dir / "config.json"), quote(dir / "data"), batch, quote(dir / out));
  };
  auto one = run_bertlab(args(4, "one"));
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  auto two = run_bertlab_mpi(2, args(2, "two"));
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  // Rank 0 alone reports and writes.
  CHECK_THAT(two.output, Contains("step 4/4"));
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt", "metrics.jsonl", "checkpoint-4/trainer_state.json"})
    CHECK(fs::exists(dir / "two" / f));

  const auto l1 = losses(dir / "one/metrics.jsonl"), l2 = losses(dir / "two/metrics.jsonl");
  REQUIRE(l1.size() == 4);
  REQUIRE(l2.size() == 4);
  for (const auto& [step, loss] : l1) {
    INFO("step " << step << ": one process " << loss << ", two ranks " << l2.at(step));
    CHECK(l2.at(step) == Approx(loss).epsilon(1e-5));
  }
  SafetensorsFile a(dir / "one/model.safetensors"), b(dir / "two/model.safetensors");
  double worst = 0;
  for (const auto& [name, t] : a.tensors()) {
    std::vector<float> x(static_cast<size_t>(numel(t.shape))), y(x.size());
    a.read_f32(name, t.shape, x.data());
    b.read_f32(name, t.shape, y.data());
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, double(std::abs(x[i] - y[i])));
  }
  fmt::print("data parallel: 2 ranks x 2 sequences vs 1 x 4, 4 steps: max parameter difference {:.3g}\n", worst);
  CHECK(worst <= 1e-5);
  auto state = nlohmann::json::parse(std::ifstream(dir / "two/checkpoint-4/trainer_state.json"));
  CHECK(state["world_size"] == 2);
  CHECK(state["instances_seen"] == 4 * 2 * 2 * 2);

  // Buckets of 4 KiB overlapped with backward (many buckets), and flat after backward: the same
  // sums as the default; bf16 on the wire: close to them, not equal.
  auto params_of = [&](const std::string& out) {
    SafetensorsFile f(dir / out / "model.safetensors");
    std::map<std::string, std::vector<float>> v;
    for (const auto& [name, t] : f.tensors()) {
      v[name].resize(static_cast<size_t>(numel(t.shape)));
      f.read_f32(name, t.shape, v[name].data());
    }
    return v;
  };
  const auto reference = params_of("two");
  auto max_diff = [&](const std::string& out) {
    double d = 0;
    for (const auto& [name, x] : params_of(out))
      for (size_t i = 0; i < x.size(); ++i) d = std::max(d, double(std::abs(x[i] - reference.at(name)[i])));
    return d;
  };
  for (const char* how : {"--bucket-mb 0.004", "--no-overlap", "--bucket-mb 0.004 --allreduce-dtype bf16"}) {
    const std::string out = fmt::format("two-{}", std::hash<std::string>{}(how) % 100000);
    auto run = run_bertlab_mpi(2, args(2, out) + " " + how);
    INFO(how << "\n" << run.output);
    REQUIRE(run.exit_code == 0);
    const auto l = losses(dir / out / "metrics.jsonl");
    REQUIRE(l.size() == 4);
    const double d = max_diff(out);
    fmt::print("data parallel, {}: max parameter difference to the default {:.3g}\n", how, d);
    if (std::string(how) == "--no-overlap") {
      // The flat sum adds each rank's embedding rows before the ranks' sum, the overlapped one
      // after it (deferred rows): the same sum in another order.
      CHECK(d <= 1e-6);
      for (const auto& [step, loss] : l2) CHECK(l.at(step) == Approx(loss).epsilon(1e-6));
    } else if (std::string(how).find("bf16") == std::string::npos) {
      CHECK(d == 0.0);  // two ranks: a + b whatever the bucketing
      for (const auto& [step, loss] : l2) CHECK(l.at(step) == loss);
    } else {
      CHECK(d > 0.0);
      CHECK(d < 1e-2);  // lr 1e-3 x 4 steps bounds any parameter's change
      for (const auto& [step, loss] : l2) CHECK(l.at(step) == Approx(loss).epsilon(1e-2));
    }
  }

  // Masked LM only: the pooler and NSP head have no gradients in the graph; the whole arena is
  // still summed (their zeros), and two ranks still train like one process.
  {
    auto one_mlm = run_bertlab(args(4, "one-mlm") + " --no-nsp");
    INFO(one_mlm.output);
    REQUIRE(one_mlm.exit_code == 0);
    auto two_mlm = run_bertlab_mpi(2, args(2, "two-mlm") + " --no-nsp --bucket-mb 0.004");
    INFO(two_mlm.output);
    REQUIRE(two_mlm.exit_code == 0);
    const auto a1 = losses(dir / "one-mlm/metrics.jsonl"), a2 = losses(dir / "two-mlm/metrics.jsonl");
    REQUIRE(a2.size() == 4);
    for (const auto& [step, loss] : a1) CHECK(a2.at(step) == Approx(loss).epsilon(1e-5));
  }

  // Resuming with another number of ranks would change the data order: refused by name.
  auto changed = run_bertlab(fmt::format("train --data {} --batch-size 2 --accum-steps 2 --seed 5 --max-steps 6 "
                                         "--resume {} --out {}",
                                         quote(dir / "data"), quote(dir / "two/checkpoint-4"), quote(dir / "three")));
  CHECK(changed.exit_code == 1);
  CHECK_THAT(changed.output, Contains("cannot resume") && Contains("world_size"));
}
