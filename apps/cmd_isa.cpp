// bertlab isa: the instruction-set levels of this CPU, the one in force, and the values of
// ONEDNN_MAX_CPU_ISA (the one setting that caps oneDNN and bertlab's own kernels) it accepts.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include "apps/commands.h"
#include "ops/isa.h"
#include "ops/peak.h"

namespace bertlab::app {

void add_isa_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("isa", "Print this CPU's instruction-set level, the one in force (after "
                                         "ONEDNN_MAX_CPU_ISA) and the caps it accepts");
  auto caps_only = std::make_shared<bool>(false);
  cmd->add_flag("--caps", *caps_only,
                "Print only the ONEDNN_MAX_CPU_ISA values this CPU accepts, one per line, lowest first "
                "(for scripts that run tests at every level)");
  cmd->callback([caps_only] {
    if (*caps_only) {
      for (const auto& c : ops::isa_cap_values()) fmt::print("{}\n", c);
      return;
    }
    const std::string cap = ops::isa_cap_value();
    fmt::print("cpu:      {}\n", ops::to_string(ops::cpu_isa()));
    fmt::print("active:   {}{}\n", ops::to_string(ops::active_isa()),
               cap.empty() ? "" : fmt::format(" ({}={})", ops::isa_cap_variable(), cap));
    fmt::print("oneDNN:   {}\n", ops::dnnl_isa_name());
    fmt::print("bf16:     {}\n", ops::cpu_has_bf16() ? "native" : "no: " + ops::bf16_unavailable_reason());
    fmt::print("caps:     {}\n", fmt::join(ops::isa_cap_values(), " "));
  });
}

}  // namespace bertlab::app
