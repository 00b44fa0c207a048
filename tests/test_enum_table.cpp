// Every enum with names (base/enum_table.h): each value's name parses back to it, names are
// unique and non-empty, and a name that is not one is refused naming the setting and every
// accepted name.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "base/enum_table.h"
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
#include "runtime/data/corpus.h"
#include "runtime/data/downstream.h"
#include "runtime/graph.h"
#include "runtime/precision.h"
#include "runtime/profiler.h"
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
