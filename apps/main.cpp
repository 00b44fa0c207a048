// bertlab: one command, many subcommands (graph, infer, bench, ...).
#include <fmt/core.h>

#include <cstdio>
#include <exception>
#include <filesystem>

#include "apps/commands.h"
#include "apps/plugins.h"
#include "ops/isa.h"
#include "runtime/distributed.h"
#include "base/error.h"

namespace {

// After an error in one rank of an MPI job the others would wait in their next collective:
// end the whole job.
int end_job(int status) {
  if (bertlab::dist::launched_by_mpi() && bertlab::dist::World::get().distributed())
    bertlab::dist::World::get().abort(status);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  // Under mpirun every rank runs the same command; rank 0 alone prints results (errors, on
  // stderr, still come from every rank).
  if (bertlab::dist::launched_by_mpi() && bertlab::dist::World::get().rank() != 0)
    std::freopen("/dev/null", "w", stdout);
  CLI::App app{"bertlab: run, train, profile and model BERT on CPUs and accelerators"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "bertlab 0.1.0");
  bertlab::app::add_all_commands(app);
  bertlab::app::run_startup_hooks();  // plugins linked in (lab 2's seam: apps/plugins.h)
  try {
    (void)bertlab::ops::active_isa();  // a bad ONEDNN_MAX_CPU_ISA is refused before any work
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const bertlab::Error& e) {
    fmt::print(stderr, "bertlab: error: {}\n", e.what());
    return end_job(1);
  } catch (const std::filesystem::filesystem_error& e) {
    // Names the path(s) and the system's reason, e.g. "cannot create directories: No space left
    // on device [out/checkpoint-5]".
    fmt::print(stderr, "bertlab: error: {}\n", e.what());
    return end_job(1);
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "bertlab: error: out of memory: the model, batch or sequence length given "
                       "needs more memory than this machine has\n");
    return end_job(1);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bertlab: internal error: {}\n", e.what());
    return end_job(2);
  }
  return 0;
}
