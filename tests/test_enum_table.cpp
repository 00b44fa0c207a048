// Every enum with names (base/enum_table.h): each value's name parses back to it, names are
// unique and non-empty, and a name that is not one is refused naming the setting and every
// accepted name.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "base/enum_table.h"
#include "base/json_file.h"
#include "hwmodel/arrangement.h"
#include "hwmodel/cluster.h"
#include "hwmodel/encoder_layer.h"
#include "hwmodel/lackey_replay.h"
#include "hwmodel/system.h"
#include "labs/arrangement/lab.h"
#include "labs/profile/lab.h"
#include "ops/activation.h"
#include "ops/isa.h"
#include "ops/peak.h"
#include "runtime/bert_config.h"
#include "data/corpus.h"
#include "data/downstream.h"
#include "runtime/graph.h"
#include "runtime/op_rules.h"
#include "runtime/precision.h"
#include "runtime/profiler.h"
#include "runtime/run_loop.h"
#include "runtime/trainer.h"

using namespace bertlab;
using Catch::Matchers::Contains;

namespace {

template <typename E>
void check_table(const char* what) {
  INFO(what);
  const auto names = enum_names(E{});
  REQUIRE(enum_count<E> == names.size());
  REQUIRE(enum_count<E> > 0);
  std::set<std::string> seen;
  for (size_t i = 0; i < enum_count<E>; ++i) {
    const E e = static_cast<E>(i);
    const std::string name = to_string(e);
    INFO("value " << i << " '" << name << "'");
    CHECK(!name.empty());
    CHECK(name != "?");
    CHECK(seen.insert(name).second);  // unique
    CHECK(enum_from_string<E>(name, what) == e);
    CHECK(enum_parse<E>(name) == e);
  }
  CHECK(std::string(to_string(static_cast<E>(enum_count<E>))) == "?");  // past the end
  CHECK_FALSE(enum_parse<E>("no-such-name").has_value());
  std::string expected = "(expected one of: ";
  for (size_t i = 0; i < names.size(); ++i) expected += std::string(i ? ", " : "") + names[i];
  CHECK_THROWS_WITH(enum_from_string<E>("no-such-name", what),
                    Contains(std::string(what) + ": unknown value 'no-such-name' " + expected + ")"));
}

template <typename E>
std::vector<std::string> names_of() {
  const auto names = enum_names(E{});
  return {names.begin(), names.end()};
}

}  // namespace

TEST_CASE("Every named enum round-trips through its names and refuses others", "[enum]") {
  check_table<Phase>("phase");
  check_table<Category>("category");
  check_table<ProfileCategory>("profile category");
  check_table<OpKind>("op");
  check_table<DType>("dtype");
  check_table<Layout>("layout");
  check_table<Role>("role");
  check_table<Precision>("--precision");
  check_table<Heads>("heads");
  check_table<RunMode>("--mode");
  check_table<OptimizerKind>("--optimizer");
  check_table<LossKind>("loss");
  check_table<NonfiniteKind>("--debug-nonfinite-batch");
  check_table<RunKind>("kind");
  check_table<LrSchedule>("--lr-schedule");
  check_table<PositionInit>("--position-init");
  check_table<data::CorpusFormat>("--format");
  check_table<data::DownstreamTask>("--task");
  check_table<ops::Isa>("isa");
  check_table<ops::Activation>("activation");
  check_table<hw::Dataflow>("array.dataflow");
  check_table<hw::SystemKind>("kind");
  check_table<hw::Arrangement>("--arrangement");
  check_table<hw::ComputeModel>("array.compute_model");
  check_table<hw::CoreIsa>("core.isa");
  check_table<hw::QkvSchedule>("qkv");
  check_table<hw::CoreWalk>("core.walk");
  check_table<hw::CpuModel>("cpu_model");
  check_table<hw::AllreduceAlgorithm>("network.allreduce");
  check_table<hw::LayerOp>("encoder-layer op");
  check_table<hw::TraceFormat>("trace format");
  check_table<ops::ElementwiseKind>("elementwise kernel");
  check_table<lab::profile::Move>("move");
  check_table<lab::arrangement::CoreCost>("core cost");
}

TEST_CASE("Tables with more columns keep them in the enum's order", "[enum]") {
  // Precision's second spelling (machine.json and system-file keys) parses too.
  CHECK(std::string(file_key(Precision::fp32)) == "f32");
  CHECK(precision_from_string("f32") == Precision::fp32);
  CHECK(precision_from_string("bf16") == Precision::bf16);
  CHECK_THROWS_WITH(precision_from_string("fp16", "--precision"),
                    Contains("--precision: unknown value 'fp16' (expected one of: fp32, bf16)"));
  // The ISA levels' lowest cap names, and kIsas in enum order.
  CHECK(std::string(ops::isa_cap_name(ops::Isa::portable)) == "SSE41");
  CHECK(std::string(ops::isa_cap_name(ops::Isa::avx512_core_amx)) == "AVX512_CORE_AMX");
  for (size_t i = 0; i < ops::kIsas.size(); ++i) CHECK(static_cast<size_t>(ops::kIsas[i]) == i);
  // The profile categories' labels are their own column, not the ids.
  CHECK(std::string(category_label(ProfileCategory::gemm_dx)) == "backward dX GEMMs");
  // The heads' Hugging Face architectures (config.json), as fine-tuned models name them.
  CHECK(std::string(hf_architecture(Heads::none)) == "BertModel");
  CHECK(std::string(hf_architecture(Heads::pretraining)) == "BertForPreTraining");
  CHECK(std::string(hf_architecture(Heads::sequence_classification)) == "BertForSequenceClassification");
  CHECK(std::string(hf_architecture(Heads::token_classification)) == "BertForTokenClassification");
  // The element-wise kernels' machine.json keys: the activation's name and the kind's suffix.
  using ops::ElementwiseKernel;
  CHECK(ops::to_string(ElementwiseKernel{ElementwiseKernel::Kind::activation, ops::Activation::gelu}) == "gelu");
  CHECK(ops::to_string(ElementwiseKernel{ElementwiseKernel::Kind::activation_grad, ops::Activation::silu}) == "silu_grad");
  CHECK(ops::to_string(ElementwiseKernel{ElementwiseKernel::Kind::dropout, ops::Activation::none}) == "dropout");
}

TEST_CASE("Names that flags and files spell are pinned", "[enum]") {
  // --mode, --sweep mode and a graph's meta.run.mode; --optimizer, meta.run.optimizer and
  // trainer_state.json; --heads (the two it accepts) and meta.run.heads.
  CHECK(names_of<RunMode>() == std::vector<std::string>{"infer", "train"});
  CHECK(names_of<OptimizerKind>() == std::vector<std::string>{"adamw", "lamb"});
  CHECK(std::string(to_string(Heads::pretraining)) == "pretraining");
  CHECK(std::string(to_string(Heads::none)) == "none");
  // A cross-entropy node's attribute 'loss' in graph files, read where it is used.
  CHECK(names_of<LossKind>() == std::vector<std::string>{"mlm", "nsp", "classifier"});
  Node n;
  n.name = "nsp.loss";
  n.attrs = {{"loss", "nsp"}};
  CHECK(loss_kind_of(n) == LossKind::nsp);
  for (const nlohmann::json& bad : {nlohmann::json::object(), nlohmann::json{{"loss", "sop"}}, nlohmann::json{{"loss", 1}}}) {
    n.attrs = bad;
    CHECK_THROWS_WITH(loss_kind_of(n), Contains("loss node 'nsp.loss' needs attribute 'loss': \"mlm\", \"nsp\" or \"classifier\""));
  }
  // --debug-nonfinite-batch STEP:MICRO:KIND, the kind spelled loss or grad.
  CHECK(names_of<NonfiniteKind>() == std::vector<std::string>{"loss", "grad"});
  CHECK(nonfinite_injection_from_string("5:1:grad") == NonfiniteInjection{5, 1, NonfiniteKind::gradients});
  CHECK(nonfinite_injection_from_string("5:1:loss") == NonfiniteInjection{5, 1, NonfiniteKind::loss});
  CHECK(nonfinite_injection_from_string("5") == NonfiniteInjection{5, NonfiniteInjection::kEveryMicroBatch, NonfiniteKind::loss});
  CHECK_THROWS_WITH(nonfinite_injection_from_string("5:1:gradients"),
                    Contains("--debug-nonfinite-batch 5:1:gradients: expected STEP[:MICRO[:loss|grad]]"));
  // System files' array.dataflow: the short names, or SCALE-Sim's long ones (the table's column).
  CHECK(names_of<hw::Dataflow>() == std::vector<std::string>{"ws", "os", "is"});
  auto system = read_json_file(std::string(BERTLAB_SOURCE_DIR) + "/configs/systems/scalesim-32x32.json", "system");
  for (const auto& [name, df] : {std::pair{"weight_stationary", hw::Dataflow::ws}, {"output_stationary", hw::Dataflow::os},
                                 {"input_stationary", hw::Dataflow::is}, {"is", hw::Dataflow::is}}) {
    system["array"]["dataflow"] = name;
    CHECK(hw::system_from_json(system, "scalesim-32x32.json").array.dataflow == df);
  }
  system["array"]["dataflow"] = "row_stationary";
  CHECK_THROWS_WITH(hw::system_from_json(system, "s.json"),
                    Contains("s.json: field 'array.dataflow': unknown value 'row_stationary' (expected one of: ws, os, is)"));
}
