// Graph JSON (`bertlab graph --json`, read by `bertlab estimate --graph`).
#include "fuzz/fuzz_util.h"
#include "runtime/graph.h"
#include "base/json_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  const auto file = fuzz::write_input("graph.json", data, size);
  return fuzz::expect_clean([&] {
    Graph g = graph_from_json(read_json_file(file, "graph file"));
    (void)g.nodes().size();
  });
}
