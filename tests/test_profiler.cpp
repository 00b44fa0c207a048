// Profiler: category mapping, breakdowns that add up to the measured step, FLOPs and bytes per
// category against hand-computed values, Chrome trace, sweeps, machine.json, the CLI and the
// HTML report rendered in headless Chromium. No timing is asserted: only structure and sums.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/bert_builder.h"
#include "base/error.h"
#include "runtime/fusion.h"
#include "runtime/model.h"
#include "report/sweep.h"
#include "runtime/profiler.h"
#include "test_util.h"
#include "test_configs.h"

using namespace bertlab;
namespace fs = std::filesystem;

namespace {

BertConfig tiny_config() { return testing::tiny_graph_config(); }

Graph tiny_graph(int64_t batch, int64_t seq) {
  RunSpec r;
  r.batch = batch;
  r.seq = seq;
  r.heads = Heads::none;
  Graph g = build_bert(tiny_config(), r);
  apply_fusions(g);
  return g;
}

const Roofline kRoof{100.0, 10.0};

double category_sum(const Profile& p) {
  double s = 0;
  for (const auto& r : p.categories) s += r.seconds;
  return s;
}

const BreakdownRow& row(const Profile& p, ProfileCategory c) { return p.categories.at(static_cast<size_t>(c)); }

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / fmt::format("bertlab_profiler_{}_{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

using bertlab::testing::run_shell;

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

const std::string kBinary = BERTLAB_RUN BERTLAB_BINARY;
const std::string kTinyConfig = std::string(BERTLAB_SOURCE_DIR) + "/configs/bert-tiny.json";

}  // namespace

TEST_CASE("Every op kind has a profile category", "[profiler]") {
  for (size_t k = 0; k < kOpKindCount; ++k) CHECK_NOTHROW(profile_category_of(static_cast<OpKind>(k)));
  CHECK(profile_category_of(OpKind::linear) == ProfileCategory::gemm_linear);
  CHECK(profile_category_of(OpKind::attn_context_grad_v) == ProfileCategory::gemm_attention);
  CHECK(profile_category_of(OpKind::linear_grad_input) == ProfileCategory::gemm_dx);
  CHECK(profile_category_of(OpKind::linear_grad_weight) == ProfileCategory::gemm_dw);
  CHECK(profile_category_of(OpKind::dropout_grad) == ProfileCategory::dropout);
  CHECK(profile_category_of(OpKind::cross_entropy_grad) == ProfileCategory::loss);
  CHECK(profile_category_of(OpKind::lamb_update) == ProfileCategory::optimizer);
  CHECK(profile_category_of(OpKind::gather_rows_grad) == ProfileCategory::other);
  // Every OpKind's category is a GEMM category exactly when the graph says gemm.
  for (size_t k = 0; k < kOpKindCount; ++k) {
    auto kind = static_cast<OpKind>(k);
    bool gemm_kind = kind == OpKind::linear || kind == OpKind::attn_scores || kind == OpKind::attn_context ||
                     kind == OpKind::linear_grad_input || kind == OpKind::linear_grad_weight ||
                     kind == OpKind::attn_scores_grad_q || kind == OpKind::attn_scores_grad_k ||
                     kind == OpKind::attn_context_grad_probs || kind == OpKind::attn_context_grad_v;
    CHECK(is_gemm(profile_category_of(kind)) == gemm_kind);
  }
  CHECK(layer_of("encoder.3.attention.qkv") == "encoder.3");
  CHECK(layer_of("encoder.11.ffn.output.grad_weight") == "encoder.11");
  CHECK(layer_of("backward.encoder.7.ffn.gelu") == "encoder.7");
  CHECK(layer_of("embeddings.layernorm") == "embeddings");
  CHECK(layer_of("optimizer") == "optimizer");
}

TEST_CASE("Categories add up to the step with unattributed time included", "[profiler]") {
  Graph g = tiny_graph(2, 7);
  std::vector<double> secs(g.nodes().size());
  double sum = 0;
  for (size_t i = 0; i < secs.size(); ++i) sum += secs[i] = 1e-4 * (1 + i % 5);
  const double step = sum + 3e-4;
  Profile p = make_profile(g, secs, step, kRoof);
  CHECK(p.step_seconds == Approx(step));
  CHECK(category_sum(p) == Approx(step).epsilon(1e-12));
  CHECK(row(p, ProfileCategory::unattributed).seconds == Approx(3e-4));
  double layers = 0, phases = 0;
  for (const auto& r : p.layers) layers += r.seconds;
  for (const auto& r : p.phases) phases += r.seconds;
  CHECK(layers == Approx(step));
  CHECK(phases == Approx(step));
  REQUIRE(p.layers.front().key == "embeddings");
  CHECK(std::count_if(p.layers.begin(), p.layers.end(), [](auto& r) { return r.key.rfind("encoder.", 0) == 0; }) == 2);

  // Accumulation: forward and backward nodes ran `accum` times in the measured step.
  Profile p4 = make_profile(g, secs, step, kRoof, 4);
  CHECK(p4.step_seconds == Approx(step));
  CHECK(category_sum(p4) == Approx(step));
  CHECK(p4.total_flops() == Approx(4 * p.total_flops()));
}

TEST_CASE("FLOPs and bytes per category match hand-computed values", "[profiler]") {
  const int64_t B = 2, S = 7, H = 12, F = 20, nh = 3, d = 4, L = 2, M = B * S;
  Graph g = tiny_graph(B, S);
  Profile p = make_profile(g, std::vector<double>(g.nodes().size(), 1e-3), 1.0, kRoof);
  // Linear layers per encoder layer (bias, fused residual and GELU in the epilogue), plus the
  // pooler dense with its fused tanh.
  const double linear = L * ((2.0 * M * 3 * H * H + M * 3 * H) + (2.0 * M * H * H + 2 * M * H) +
                             (2.0 * M * F * H + M * F + 5.0 * M * F) + (2.0 * M * H * F + 2 * M * H)) +
                        (2.0 * B * H * H + B * H + B * H);
  CHECK(row(p, ProfileCategory::gemm_linear).flops == Approx(linear));
  CHECK(row(p, ProfileCategory::gemm_linear).nodes == 4 * L + 1);
  const double attention = L * (2.0 * (2.0 * B * nh * S * S * d) + 2.0 * B * nh * S * S);
  CHECK(row(p, ProfileCategory::gemm_attention).flops == Approx(attention));
  // Q, K thirds + mask bias + scores; probs + V third + context.
  const double attention_bytes = 4.0 * L * ((2 * M * H + B * S + B * nh * S * S) + (B * nh * S * S + M * H + M * H));
  CHECK(row(p, ProfileCategory::gemm_attention).bytes == Approx(attention_bytes));
  CHECK(row(p, ProfileCategory::softmax).flops == Approx(5.0 * L * B * nh * S * S));
  CHECK(row(p, ProfileCategory::softmax).bytes == Approx(4.0 * L * 2 * B * nh * S * S));
  CHECK(row(p, ProfileCategory::layernorm).flops == Approx(7.0 * M * H * (2 * L + 1)));
  CHECK(row(p, ProfileCategory::layernorm).bytes == Approx(4.0 * (2 * M * H + 2 * H) * (2 * L + 1)));
  CHECK(row(p, ProfileCategory::embedding).flops == Approx(2.0 * M * H));
  CHECK(row(p, ProfileCategory::embedding).bytes == Approx(4.0 * (2 * M + 4 * M * H)));
  CHECK(row(p, ProfileCategory::activation).nodes == 0);  // fused into the GEMMs
  CHECK(row(p, ProfileCategory::add).nodes == 0);
  CHECK(row(p, ProfileCategory::other).nodes == 2);        // mask bias, first token

  // Roofline per node: bound = max(flops / peak, bytes / bandwidth).
  for (const auto& n : p.nodes)
    CHECK(n.bound_seconds == Approx(std::max(n.flops / 100e9, n.bytes / 10e9)));
}

TEST_CASE("Profiling the executor gives a breakdown summing to the step and a trace with one event per node", "[profiler]") {
  Graph g = tiny_graph(2, 7);
  const size_t nodes = g.nodes().size();
  Model m = init_model(tiny_config(), Heads::none, 1);
  Executor ex(std::move(g), m.params);
  BertInputs in;
  in.batch = 2;
  in.seq = 7;
  in.input_ids.assign(14, 3);
  in.token_type_ids.assign(14, 0);
  in.attention_mask.assign(14, 1);
  set_inputs(ex, in);
  ProfileOptions o;
  o.runs = 3;
  Profile p = profile_executor(ex, kRoof, o);
  CHECK(p.nodes.size() == nodes);
  CHECK(p.kept_runs >= 2);
  CHECK(category_sum(p) == Approx(p.step_seconds).epsilon(1e-9));
  CHECK(row(p, ProfileCategory::unattributed).seconds >= 0);
  CHECK(p.step_min_seconds <= p.step_median_seconds);

  auto j = profile_to_json(p);
  double share = 0;
  for (const auto& c : j.at("categories")) share += c.at("share").get<double>();
  CHECK(share == Approx(1.0));
  CHECK(j.at("nodes").size() == nodes);

  auto trace = nlohmann::json::parse(profile_chrome_trace(p).dump());
  size_t events = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    ++events;
    CHECK(e.at("args").contains("flops"));
    CHECK(e.at("args").contains("bytes"));
    CHECK(e.at("dur").get<double>() >= 0);
  }
  CHECK(events == nodes);

  auto overhead = measure_timing_overhead(ex, 2);
  CHECK(overhead.untimed_seconds > 0);
  CHECK(overhead.timed_seconds > 0);
}

TEST_CASE("Sweep arguments give the cartesian product and are validated and CSV has one row per category", "[profiler]") {
  auto pts = parse_sweeps({"batch=1,8", "precision=fp32,bf16", "seq=128"});
  REQUIRE(pts.size() == 4);
  CHECK(pts[0] == SweepPoint{{SweepKey::batch, "1"}, {SweepKey::precision, "fp32"}, {SweepKey::seq, "128"}});
  CHECK(pts[3] == SweepPoint{{SweepKey::batch, "8"}, {SweepKey::precision, "bf16"}, {SweepKey::seq, "128"}});
  CHECK(sweep_point_json(pts[3]) == nlohmann::json{{"batch", "8"}, {"precision", "bf16"}, {"seq", "128"}});
  CHECK(parse_sweeps({}).size() == 1);
  CHECK_THROWS_WITH(parse_sweeps({"heads=1"}), Catch::Contains("unknown key 'heads'"));
  CHECK_THROWS_WITH(parse_sweeps({"batch=0"}), Catch::Contains("not a positive integer"));
  CHECK_THROWS_WITH(parse_sweeps({"batch=x"}), Catch::Contains("not a positive integer"));
  CHECK_THROWS_WITH(parse_sweeps({"precision=fp16"}), Catch::Contains("unknown value 'fp16'"));
  CHECK_THROWS_WITH(parse_sweeps({"seq=1", "seq=2"}), Catch::Contains("given twice"));
  CHECK_THROWS_WITH(parse_sweeps({"batch"}), Catch::Contains("key=value"));

  Graph g = tiny_graph(1, 4);
  std::vector<SweepEntry> entries{
      {{{SweepKey::batch, "1"}, {SweepKey::precision, "fp32"}}, make_profile(g, std::vector<double>(g.nodes().size(), 1e-4), 1.0, kRoof), ""},
      {{{SweepKey::batch, "1"}, {SweepKey::precision, "bf16"}}, std::nullopt, "machine.json has no bf16 GEMM peak"}};
  auto csv = sweep_csv(entries);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + static_cast<long>(kProfileCategoryCount) + 1);
  CHECK(csv.find("skipped: machine.json has no bf16 GEMM peak") != std::string::npos);
  auto md = markdown_report(entries, MachineInfo{});
  CHECK(md.find("| batch=1 fp32 |") != std::string::npos);
}

TEST_CASE("calibrate writes machine.json and the reader names what is wrong", "[profiler]") {
  CalibrateOptions o;
  o.seconds = 0.001;
  o.square_n = 64;
  o.batch = 1;
  o.seq = 8;
  o.bandwidth_array_bytes = 1 << 20;
  MachineInfo m = calibrate_machine(o);
  CHECK(m.gemm_peak_f32 > 0);
  CHECK(m.bandwidth_triad > 0);
  CHECK(m.threads >= 1);
  CHECK(m.gemms.size() >= 10);
  CHECK(m.gemm_peak_bf16.has_value() == m.bf16);
  auto j = machine_to_json(m);
  CHECK(j.at("gemm_peak_gflops").at("f32").get<double>() == Approx(m.gemm_peak_f32));
  CHECK(j.at("bandwidth_gbs").contains("triad"));
  CHECK(machine_to_json(machine_from_json(j, "m.json")) == j);
  // The element-wise kernels' rates: every kernel measured, at the FFN's size (batch 1, seq 8:
  // 8 tokens x 3072), written and read back; a zero rate names its field; an older file
  // without them still loads.
  REQUIRE(m.elementwise_gelem_per_s.has_value());
  for (double r : *m.elementwise_gelem_per_s) CHECK(r > 0);
  CHECK(m.elementwise_elements == 8 * 3072);
  CHECK(j.at("elementwise_gelem_per_s").at("gelu_grad").get<double>() ==
        Approx((*m.elementwise_gelem_per_s)[*ops::elementwise_index(
            {ops::ElementwiseKernel::Kind::activation_grad, ops::Activation::gelu})]));
  auto zero = j;
  zero["elementwise_gelem_per_s"]["dropout"] = 0;
  CHECK_THROWS_WITH(machine_from_json(zero, "m.json"), Catch::Contains("elementwise_gelem_per_s.dropout"));
  // A file written before a kernel existed (a newly rated activation): that kernel not calibrated.
  auto before_silu = j;
  before_silu["elementwise_gelem_per_s"].erase("silu_grad");
  const auto partial = machine_from_json(before_silu, "m.json");
  REQUIRE(partial.elementwise_gelem_per_s.has_value());
  for (size_t i = 0; i < ops::kElementwiseKernels.size(); ++i)
    CHECK(((*partial.elementwise_gelem_per_s)[i] > 0) != (ops::to_string(ops::kElementwiseKernels[i]) == "silu_grad"));
  auto older = j;
  older.erase("elementwise_gelem_per_s");
  older.erase("elementwise_elements");
  CHECK_FALSE(machine_from_json(older, "m.json").elementwise_gelem_per_s.has_value());

  auto broken = j;
  broken["bandwidth_gbs"].erase("triad");
  CHECK_THROWS_WITH(machine_from_json(broken, "m.json"),
                    Catch::Contains("bandwidth_gbs.triad") && Catch::Contains("bertlab calibrate"));
  broken = j;
  broken["gemm_peak_gflops"]["f32"] = "fast";
  CHECK_THROWS_WITH(machine_from_json(broken, "m.json"), Catch::Contains("gemm_peak_gflops.f32"));
  CHECK_THROWS_WITH(load_machine("/nonexistent/machine.json"), Catch::Contains("bertlab calibrate"));
  auto dir = temp_dir("machine");
  std::ofstream(dir / "bad.json") << "{ not json";
  CHECK_THROWS_WITH(load_machine(dir / "bad.json"), Catch::Contains("not valid JSON") && Catch::Contains("bertlab calibrate"));
  fs::remove_all(dir);
}

TEST_CASE("bertlab calibrate and profile write their files and refuse bad input", "[profiler][cli]") {
  auto dir = temp_dir("cli");
  const std::string machine = (dir / "machine.json").string();
  auto cal = run_shell(fmt::format("{} calibrate --out {} --seconds 0.001 --square 64 --batch 1 --seq 8 "
                                     "--bandwidth-mb 1 --threads 1",
                                     kBinary, machine));
  INFO(cal.output);
  REQUIRE(cal.exit_code == 0);
  auto mj = read_json(machine);
  CHECK(mj.at("format") == "bertlab-machine");
  CHECK(mj.at("gemm_peak_gflops").at("f32").get<double>() > 0);
  CHECK(mj.at("bandwidth_gbs").at("read").get<double>() > 0);
  CHECK(mj.at("threads") == 1);

  const std::string base = fmt::format("{} profile --config {} --machine {} --runs 2 --warmup 0 --threads 1",
                                       kBinary, kTinyConfig, machine);
  auto prof = run_shell(fmt::format("{} --batch 1 --seq 8 --json {}/p.json --trace {}/t.json", base,
                                      dir.string(), dir.string()));
  INFO(prof.output);
  REQUIRE(prof.exit_code == 0);
  CHECK(prof.output.find("unattributed") != std::string::npos);
  auto pj = read_json(dir / "p.json");
  double share = 0;
  for (const auto& c : pj.at("categories")) share += c.at("share").get<double>();
  CHECK(share == Approx(1.0));
  auto tj = read_json(dir / "t.json");
  size_t events = 0;
  for (const auto& e : tj.at("traceEvents")) events += e.at("ph") == "X";
  CHECK(events == pj.at("nodes").size());

  // Training always has the pretraining heads: --heads none is overridden for the graph, and the
  // model must get them too (it was built without them, and the run failed on a missing weight).
  auto train_no_heads = run_shell(base + " --batch 1 --seq 8 --mode train --heads none");
  INFO(train_no_heads.output);
  CHECK(train_no_heads.exit_code == 0);
  CHECK(train_no_heads.output.find("mode=train heads=pretraining") != std::string::npos);

  auto missing = run_shell(fmt::format("{} profile --config {} --machine {}/none.json", kBinary, kTinyConfig, dir.string()));
  CHECK(missing.exit_code == 1);
  CHECK(missing.output.find("bertlab calibrate") != std::string::npos);
  auto bad_key = run_shell(base + " --sweep colour=red");
  CHECK(bad_key.exit_code == 1);
  CHECK(bad_key.output.find("unknown key 'colour'") != std::string::npos);
  auto bad_value = run_shell(base + " --sweep batch=1,zero");
  CHECK(bad_value.exit_code == 1);
  // bf16 runs where the CPU has it; a machine.json without a bf16 peak is refused by name.
  auto bf16 = run_shell(fmt::format("{} --batch 1 --seq 8 --precision bf16 --json {}/b.json", base, dir.string()));
  INFO(bf16.output);
  if (mj.at("cpu").at("bf16").get<bool>()) {
    REQUIRE(bf16.exit_code == 0);
    auto bj = read_json(dir / "b.json");
    CHECK(bj.at("run").at("precision") == "bf16");
    double bf16_share = 0;
    for (const auto& c : bj.at("categories")) bf16_share += c.at("share").get<double>();
    CHECK(bf16_share == Approx(1.0));
  }
  auto no_bf16 = mj;
  no_bf16["cpu"]["bf16"] = false;
  no_bf16["gemm_peak_gflops"]["bf16"] = nullptr;
  std::ofstream(dir / "no_bf16.json") << no_bf16.dump();
  auto refused = run_shell(fmt::format("{} profile --config {} --machine {}/no_bf16.json --runs 1 --precision bf16",
                                         kBinary, kTinyConfig, dir.string()));
  CHECK(refused.exit_code == 1);
  CHECK(refused.output.find("no bf16 GEMM peak") != std::string::npos);
  auto unwritable = run_shell(base + " --json /nonexistent/dir/p.json");
  CHECK(unwritable.exit_code == 1);
  CHECK(unwritable.output.find("/nonexistent/dir/p.json") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("HTML sweep report renders its SVG charts in headless Chromium", "[profiler][html]") {
  auto dir = temp_dir("html");
  const std::string machine = (dir / "machine.json").string();
  REQUIRE(run_shell(fmt::format("{} calibrate --out {} --seconds 0.001 --square 64 --batch 1 --seq 8 --bandwidth-mb 1",
                                  kBinary, machine)).exit_code == 0);
  auto sweep = run_shell(fmt::format(
      "{} profile --config {} --machine {} --runs 1 --warmup 0 --sweep seq=4,8 --sweep precision=fp32,bf16 "
      "--html {}/r.html --csv {}/r.csv",
      kBinary, kTinyConfig, machine, dir.string(), dir.string()));
  INFO(sweep.output);
  REQUIRE(sweep.exit_code == 0);
  std::ifstream csv(dir / "r.csv");
  std::string csv_text((std::istreambuf_iterator<char>(csv)), {});
  // bf16 points are profiled where the CPU has bf16, else listed as skipped.
  const bool bf16 = read_json(machine).at("cpu").at("bf16").get<bool>();
  const long profiled = bf16 ? 4 : 2;
  CHECK(std::count(csv_text.begin(), csv_text.end(), '\n') ==
        1 + profiled * static_cast<long>(kProfileCategoryCount) + (4 - profiled));

  const auto charts = testing::render_charts_in_chromium(dir / "r.html", dir);
  CHECK(charts.expected == 1 + profiled);  // stacked bars + a roofline per profiled point
  CHECK(charts.rendered == charts.expected);
  fs::remove_all(dir);
}
