// The arrangement table (hwmodel/arrangement.h): every row, whatever it holds, must give a
// layout that stores each element once, a compute schedule that charges every array
// instruction to one core, and names the CLI accepts. The traffic entries of every row are
// checked against the exact simulator in test_hwmodel_sim.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <set>
#include <string>

#include "hwmodel/arrangement.h"
#include "hwmodel/estimate.h"
#include "hwmodel/layout.h"
#include "hwmodel/system.h"
#include "base/error.h"

using namespace bertlab;
using namespace bertlab::hw;

TEST_CASE("the arrangement table has one row per enum value, found by its name", "[hwmodel][arrangement]") {
  const auto all = arrangements();
  REQUIRE(all.size() >= 2);
  std::set<std::string> names;
  for (size_t i = 0; i < all.size(); ++i) {
    const ArrangementDesc& d = all[i];
    INFO("row " << i << " " << to_string(d.id));
    CHECK(static_cast<size_t>(d.id) == i);  // enum order: arrangement_desc() indexes by value
    CHECK(&arrangement_desc(d.id) == &d);
    CHECK(arrangement_from_string(to_string(d.id), "--arrangement") == d.id);
    CHECK(names.insert(to_string(d.id)).second);
    CHECK(d.address != nullptr);
    CHECK(d.bytes != nullptr);
    CHECK(d.analytic_gemm != nullptr);
    CHECK(d.trace_gemm != nullptr);
    CHECK(d.gemm_compute != nullptr);
    for (const char* text : {d.head_split, d.head_operand, d.head_concat, d.transpose, d.row_access, d.rows_gathered,
                             d.rows_scattered, d.transposed_dy, d.transposed_ll}) {
      REQUIRE(text != nullptr);
      CHECK(std::string(text).size() > 0);
    }
  }
  try {
    arrangement_from_string("cwma", "--arrangement");
    FAIL("an unknown arrangement was accepted");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("--arrangement") != std::string::npos);
    CHECK(what.find("'cwma'") != std::string::npos);
    for (const auto& d : all) CHECK(what.find(to_string(d.id)) != std::string::npos);
  }
}

TEST_CASE("every arrangement's layout stores each element once inside its bytes", "[hwmodel][arrangement]") {
  for (const auto& d : arrangements())
    for (int64_t S : {4, 8, 16})
      for (int64_t cols : {S, 3 * S, 3 * S + 1}) {
        INFO(to_string(d.id) << " S=" << S << " cols=" << cols);
        const int64_t rows = 7, elem = 2;
        const uint64_t base = 4096;
        const MatrixView v = make_view(d.id, base, rows, cols, elem, S);
        const int64_t bytes = view_bytes(d.id, rows, cols, elem, S);
        CHECK(bytes >= rows * cols * elem);
        CHECK(bytes == d.bytes(rows, cols, elem, S));
        const Placement p{base, rows, cols, elem, S};
        std::set<uint64_t> seen;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const uint64_t a = v.addr(r, c);
            CHECK(a == d.address(p, r, c));  // the panel form, where there is one, is the layout
            CHECK(a >= base);
            CHECK(a + elem <= base + bytes);
            CHECK(a % elem == 0);
            seen.insert(a);
          }
        CHECK(static_cast<int64_t>(seen.size()) == rows * cols);
        // A sub-view addresses the same bytes as the whole view.
        const MatrixView sv = sub_view(v, 2, 3, 1, cols - 1);
        for (int64_t r = 0; r < 3; ++r)
          for (int64_t c = 0; c < cols - 1; ++c) CHECK(sv.addr(r, c) == v.addr(2 + r, 1 + c));
        // The sweeps over a block visit exactly its elements' bytes, each once.
        std::multiset<uint64_t> swept, elements;
        for (const Sweep& s : block_sweeps(v, 1, 5, 1, cols - 1))
          for (int64_t i = 0; i < s.count; ++i)
            for (int64_t b = 0; b < s.width; ++b) swept.insert(s.start + i * s.stride + b);
        for (int64_t r = 1; r < 6; ++r)
          for (int64_t c = 1; c < cols; ++c)
            for (int64_t b = 0; b < elem; ++b) elements.insert(v.addr(r, c) + b);
        CHECK(swept == elements);
      }
}

TEST_CASE("every arrangement's GEMM schedule charges each array instruction to one core", "[hwmodel][arrangement]") {
  SystemDesc s = load_system(std::string(BERTLAB_SOURCE_DIR) + "/configs/systems/paper-ticsat.json");
  // One cycle per issue of every kind: the cycles of all cores then count the issues.
  s.array.cycles_per_issue = 1;
  s.array.output_cycles_per_issue = 1;
  for (const auto& d : arrangements())
    for (int64_t P : {1, 2, 4})
      for (int64_t products : {1, 3}) {
        INFO(to_string(d.id) << " cores=" << P << " products=" << products);
        s.cores = P;
        GemmWork w;
        w.arrangement = d.id;
        w.S = 8;
        w.m = s.rwma_block_rows + 72;  // two sequence blocks, the second a partial one
        w.n = 64;
        w.k = 32;
        w.block_rows = s.rwma_block_rows;
        for (int64_t i = 0; i < products; ++i)
          w.instances.push_back({make_view(d.id, 0, w.m, w.k, 1, w.S), make_view(d.id, 0, w.k, w.n, 1, w.S),
                                 make_view(d.id, 0, w.m, w.n, 1, w.S)});
        GemmShape gm;
        gm.batch = products;
        gm.m = w.m;
        gm.n = w.n;
        gm.k = w.k;
        std::vector<double> per_core(P, 0);
        NodeEstimate n;
        d.gemm_compute(w, gm, s, per_core, n, true);
        const double total = std::accumulate(per_core.begin(), per_core.end(), 0.0);
        CHECK(total == Approx(static_cast<double>(n.issues)));
        // Every S x S tile of every product streams its M rows at least once.
        CHECK(n.tiles >= products * (w.n / w.S) * (w.k / w.S));
        CHECK(n.issues >= n.tiles * w.S);
        CHECK(!n.terms.empty());
        // The work is split: with 8 output panels and 2 sequence blocks, more than one core
        // works when there are several.
        const double busiest = *std::max_element(per_core.begin(), per_core.end());
        CHECK(busiest >= total / P);
        CHECK((busiest < total || P == 1));
      }
}
