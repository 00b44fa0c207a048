// Graph JSON (`bertlab graph --json`, read by `bertlab estimate --graph`).
#include "base/json_file.h"
#include "fuzz/fuzz_util.h"
#include "runtime/graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  return fuzz::expect_clean([&] {
    Graph g = graph_from_json(parse_json_text(fuzz::as_text(data, size), "graph.json"));
    (void)g.nodes().size();
  });
}
