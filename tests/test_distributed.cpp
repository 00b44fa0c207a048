// Data parallelism over MPI: the gradient allreduce node of the training graph, and two ranks
// training with half the batch each against one process with the whole batch.
#include <catch2/catch.hpp>

#include <fstream>

#include "hwmodel/estimate.h"
#include "runtime/bert_builder.h"
#include "runtime/distributed.h"
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
  r.batch = 2, r.seq = 8, r.mode = "train", r.world_size = 4;
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

TEST_CASE("Two MPI ranks with half the batch each train like one process with the whole batch",
          "[distributed][train][cli]") {
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

  // Resuming with another number of ranks would change the data order: refused by name.
  auto changed = run_bertlab(fmt::format("train --data {} --batch-size 2 --accum-steps 2 --seed 5 --max-steps 6 "
                                         "--resume {} --out {}",
                                         quote(dir / "data"), quote(dir / "two/checkpoint-4"), quote(dir / "three")));
  CHECK(changed.exit_code == 1);
  CHECK_THAT(changed.output, Contains("cannot resume") && Contains("world_size"));
}
