// The ISA levels and their one cap (ops/isa.h): bertlab's CPUID decoding against oneDNN's own,
// bad caps refused, bf16 refusals that name the real reason, and a portable binary on a CPU
// below its baseline (under qemu's x86-64 emulation of an older CPU).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include <dnnl.hpp>
#include <fmt/ranges.h>

#include "ops/isa.h"
#include "ops/peak.h"
#include "test_util.h"

using namespace bertlab;
using namespace bertlab::testing;
using Catch::Contains;
namespace fs = std::filesystem;

// The emulator's command line and a space in a cross build (tests/CMakeLists.txt), else empty.
#ifndef BERTLAB_RUN
#define BERTLAB_RUN ""
#endif

namespace {

const fs::path kTinyBert = fs::path(BERTLAB_SOURCE_DIR) / "tests/reference/tiny_bert";

// oneDNN's effective ISA as a bertlab level: oneDNN decodes CPUID itself (through Xbyak), so
// the two agreeing checks bertlab's decoding against an independent one.
ops::Isa level_of(dnnl::cpu_isa isa) {
  using d = dnnl::cpu_isa;
  switch (isa) {
    case d::avx2:
    case d::avx2_vnni: return ops::Isa::avx2;
    case d::avx512_core:
    case d::avx512_core_vnni: return ops::Isa::avx512_core;
    case d::avx512_core_bf16: return ops::Isa::avx512_core_bf16;
    case d::avx512_core_amx: return ops::Isa::avx512_core_amx;
    default: return ops::Isa::portable;
  }
}

// The next level above the CPU's own, or nullopt when it has the highest.
std::optional<ops::Isa> level_above_cpu() {
  for (ops::Isa i : ops::kIsas)
    if (i > ops::cpu_isa()) return i;
  return std::nullopt;
}

std::string with_cap(const std::string& cap, const std::string& args) {
  return fmt::format("env ONEDNN_MAX_CPU_ISA={} {}'{}' {}", cap, BERTLAB_RUN, BERTLAB_BINARY, args);
}

}  // namespace

TEST_CASE("ISA levels: bertlab's CPUID decoding agrees with oneDNN's, cap or no cap", "[isa]") {
  INFO("cpu " << ops::to_string(ops::cpu_isa()) << ", active " << ops::to_string(ops::active_isa()) << ", oneDNN "
              << ops::dnnl_isa_name() << ", cap '" << ops::isa_cap_value() << "'");
#if defined(__x86_64__)
  CHECK(ops::active_isa() == level_of(dnnl::get_effective_cpu_isa()));
  CHECK(ops::cpu_isa() >= ops::Isa::avx2);  // this build's baseline: it would not have started
#else
  CHECK(ops::active_isa() == ops::Isa::portable);
#endif
  CHECK(ops::active_isa() <= ops::cpu_isa());
  CHECK(ops::cpu_has_bf16() == (ops::active_isa() >= ops::Isa::avx512_core_bf16));
  CHECK(ops::cpu_has_bf16() == ops::bf16_unavailable_reason().empty());
  const auto caps = ops::isa_cap_values();
  REQUIRE(!caps.empty());
  CHECK(caps.back() == "ALL");
  // Every level up to the CPU's own has a cap name this CPU accepts, and none above it.
  for (ops::Isa i : ops::kIsas) {
    if (i == ops::Isa::portable) continue;
    INFO(ops::to_string(i));
    const bool accepted = std::find(caps.begin(), caps.end(), ops::isa_cap_name(i)) != caps.end();
    CHECK(accepted == (i <= ops::cpu_isa()));
  }
}

TEST_CASE("ISA cap: each accepted level is what oneDNN and bertlab both run at", "[isa][cli]") {
  for (const auto& cap : ops::isa_cap_values()) {
    INFO(cap);
    auto r = run_shell(with_cap(cap, "isa"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    if (cap == "ALL") {
      CHECK_THAT(r.output, Contains(fmt::format("active:   {}", ops::to_string(ops::cpu_isa()))));
      continue;
    }
    // The line "oneDNN: <its effective ISA>" must map to bertlab's active level.
    for (ops::Isa i : ops::kIsas)
      if (i != ops::Isa::portable && cap == ops::isa_cap_name(i)) {
        CHECK_THAT(r.output, Contains(fmt::format("active:   {} (ONEDNN_MAX_CPU_ISA={})", ops::to_string(i), cap)));
        CHECK_THAT(r.output, Contains(fmt::format("oneDNN:   {}", ops::to_string(i))));
      }
  }
  // Lower case is accepted, as oneDNN accepts it.
  if (ops::cpu_isa() >= ops::Isa::avx2) CHECK(run_shell(with_cap("avx2", "isa")).exit_code == 0);
}

TEST_CASE("ISA cap: an unknown value or a level the CPU lacks is refused, naming what it accepts",
          "[isa][errors][cli]") {
  const std::string accepted = fmt::format("{}", fmt::join(ops::isa_cap_values(), ", "));
  auto r = run_shell(with_cap("AVX9000", "isa"));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("bertlab: error: ONEDNN_MAX_CPU_ISA=AVX9000: unknown ISA level") && Contains(accepted));
  // Refused before any work, by every command.
  r = run_shell(with_cap("AVX9000", fmt::format("infer --model {}", quote(kTinyBert))));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("ONEDNN_MAX_CPU_ISA=AVX9000"));
  // The test runner refuses it too, instead of failing every test.
  r = run_shell(fmt::format("env ONEDNN_MAX_CPU_ISA=AVX9000 {}'{}' --list-tests", BERTLAB_RUN,
                            (fs::path(BERTLAB_BINARY).parent_path() / "bertlab_tests").string()));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("unknown ISA level"));
  if (const auto above = level_above_cpu()) {
    const std::string cap = ops::isa_cap_name(*above);
    r = run_shell(with_cap(cap, "isa"));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains(fmt::format("ONEDNN_MAX_CPU_ISA={}: this CPU does not have that level", cap)) &&
                             Contains(accepted));
  } else {
    WARN("this CPU has the highest level: no level above it to refuse");
  }
}

TEST_CASE("bf16 products refused below avx512_core_bf16 name the reason; auto says it chose fp32",
          "[isa][bf16][errors][cli]") {
  // A level without native bf16: the cap at AVX2 (every x86-64 CPU this build runs on has it),
  // or this CPU itself where it has none.
  const bool capped = ops::cpu_isa() >= ops::Isa::avx512_core_bf16;
#if defined(__x86_64__)
  const std::string prefix = capped ? "env ONEDNN_MAX_CPU_ISA=AVX2 " : "";
#else
  const std::string prefix;
#endif
  const std::string input = R"({"input_ids": [[2, 5, 3]]})";
  TempDir dir("isa");
  std::ofstream(dir / "in.json") << input;
  auto infer = [&](const std::string& precision) {
    return run_shell(fmt::format("{}{}'{}' infer --model {} --input {} --output {} --precision {}", prefix,
                                 BERTLAB_RUN, BERTLAB_BINARY, quote(kTinyBert), quote(dir / "in.json"),
                                 quote(dir / "out.safetensors"), precision));
  };
  auto r = infer("bf16");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("multiplies in bf16") && Contains("use --precision fp32"));
  if (capped) CHECK_THAT(r.output, Contains("ONEDNN_MAX_CPU_ISA=AVX2 caps this CPU below avx512_core_bf16"));
  else CHECK_THAT(r.output, Contains("no native bf16 matmul"));
  CHECK_FALSE(fs::exists(dir / "out.safetensors"));
  r = infer("auto");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("--precision auto: fp32, since"));
  CHECK(fs::exists(dir / "out.safetensors"));
}

TEST_CASE("A portable binary on a CPU without AVX2 stops with one line, not an illegal instruction",
          "[isa][cli]") {
#if defined(__x86_64__) && defined(__AVX2__) && !defined(__AVX512F__)
  // qemu-user-static emulates an x86-64 CPU of our choosing: Westmere has SSE4.2 and no AVX.
  if (run_shell("command -v qemu-x86_64-static").exit_code != 0) {
    FAIL("qemu-x86_64-static is needed: scripts/setup.sh emulate");
  }
  // Without a cap: the emulated CPU has none of this one's higher levels.
  const std::string emulate = "env -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA qemu-x86_64-static -cpu";
  auto r = run_shell(fmt::format("{} Westmere '{}' --help", emulate, BERTLAB_BINARY));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("bertlab: error: this CPU lacks AVX2 and FMA (x86-64-v3)"));
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  // And the same emulator with AVX2 (Haswell) starts it.
  r = run_shell(fmt::format("{} Haswell '{}' --version", emulate, BERTLAB_BINARY));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("bertlab 0.1.0"));
#else
  WARN("not a portable x86-64 build (BERTLAB_NATIVE=ON or another CPU): no baseline check to test");
#endif
}
