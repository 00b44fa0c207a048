// The labs' framework: the grader's isolation of student code, its comparison messages, the
// charts of the plots pages (rendered in headless Chromium) and `bertlab lab`. The graders
// themselves are run on the stubs and on the solutions by ctest (labs/CMakeLists.txt).
#include <catch2/catch.hpp>
#include <cmath>
#include <chrono>
#include <csignal>
#include <regex>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "labs/common/grader.h"
#include "report/chart.h"
#include "test_util.h"

using namespace bertlab;
using namespace bertlab::testing;

namespace {
size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// A grader built with the test suite (labs/CMakeLists.txt): lab_NAME_stub or lab_NAME_solution.
fs::path built_grader(const std::string& target) {
  const fs::path grader = fs::path(BERTLAB_BINARY).parent_path() / "labs" / target;
  INFO("build the target " << target);
  REQUIRE(fs::exists(grader));
  return grader;
}

RunResult run_grader(const fs::path& grader, const std::string& args) {
  return run_shell(fmt::format("{}'{}' {}", BERTLAB_RUN, grader.string(), args));
}

// Gradescope's results.json (labs/common/grader.h gradescope_results_json): the fields and
// their types, one point per check, the score the sum of the tests' scores.
nlohmann::json check_gradescope_format(const fs::path& file) {
  const auto j = nlohmann::json::parse(read_file(file));
  REQUIRE(j.is_object());
  REQUIRE(j.contains("score"));
  REQUIRE(j.contains("max_score"));
  REQUIRE(j.contains("tests"));
  CHECK(j["score"].is_number());
  CHECK(j["max_score"].is_number());
  CHECK(j["output"].is_string());
  CHECK(j["visibility"] == "visible");
  REQUIRE(j["tests"].is_array());
  REQUIRE_FALSE(j["tests"].empty());
  double sum = 0, max_sum = 0;
  for (const auto& t : j["tests"]) {
    REQUIRE(t.is_object());
    CHECK(t["name"].is_string());
    CHECK_FALSE(t["name"].get<std::string>().empty());
    CHECK(t["output"].is_string());
    REQUIRE(t["score"].is_number());
    REQUIRE(t["max_score"].is_number());
    CHECK(t["max_score"].get<double>() == 1);
    const std::string status = t["status"].get<std::string>();
    CHECK((status == "passed" || status == "failed"));
    CHECK(t["score"].get<double>() == (status == "passed" ? 1 : 0));
    if (status == "failed") CHECK_THAT(t["output"].get<std::string>(), Catch::Contains("hint: "));
    sum += t["score"].get<double>();
    max_sum += t["max_score"].get<double>();
  }
  CHECK(j["score"].get<double>() == sum);
  CHECK(j["max_score"].get<double>() == max_sum);
  return j;
}
}  // namespace

TEST_CASE("lab compare names the first bad element, with row and column", "[labs]") {
  std::vector<float> want{1, 2, 3, 4, 5, 6}, got = want;
  CHECK(lab::compare("y", got, want, 0, 0, 3).pass);
  got[5] = NAN;
  auto o = lab::compare("y", got, want, 1e-6, 1e-6, 3);
  CHECK_FALSE(o.pass);
  CHECK_THAT(o.detail, Catch::Contains("non-finite") && Catch::Contains("element 5 (row 1, column 2)"));
  got[5] = 6;
  got[1] = 2.5f;
  o = lab::compare("y", got, want, 1e-6, 1e-6, 3);
  CHECK_FALSE(o.pass);
  CHECK_THAT(o.detail, Catch::Contains("first mismatch at element 1 (row 0, column 1)") && Catch::Contains("2.5"));
  CHECK_FALSE(lab::compare("y", std::vector<float>(5), want, 1, 1).pass);  // sizes differ
}

TEST_CASE("a grader reports a crashing, throwing or hanging check as failed and goes on", "[labs]") {
  lab::Grader g("test");
  g.check("crashes", "-", [] {
    std::raise(SIGSEGV);
    return lab::passed();
  });
  g.check("throws", "-", []() -> lab::Outcome { throw std::logic_error("not written yet"); });
  g.check("hangs", "-", [] {
    volatile int spins = 0;
    while (true) spins = 1 + spins;  // a statement, not a used value: no -Wvolatile
    return lab::passed();
  }, 1);
  CHECK(g.finish() == 1);
  lab::Grader ok("test");
  ok.check("passes", "-", [] { return lab::passed("fine"); });
  CHECK(ok.finish() == 0);
}

TEST_CASE("a check's crash, exception or time-out names what it was working on; the next check starts clean",
          "[labs]") {
  TempDir dir("lab_working_on");
  const std::string results = (dir / "results.json").string();
  {
    lab::Grader g("test", results);
    g.check("crashes", "-", [] {
      lab::working_on("word \"abc\"");
      lab::working_on("word \"\"");  // the latest one counts
      std::raise(SIGSEGV);
      return lab::passed();
    });
    g.check("throws", "-", []() -> lab::Outcome {
      lab::working_on("layernorm_forward on 3 x 7");
      throw std::logic_error("not written yet");
    });
    g.check("hangs", "-", [] {
      lab::working_on(std::string(1000, 'x'));  // kept short
      volatile int spins = 0;
      while (true) spins = 1 + spins;
      return lab::passed();
    }, 1);
    g.check("crashes naming nothing", "-", [] {
      std::raise(SIGSEGV);
      return lab::passed();
    });
    CHECK(g.finish() == 1);
  }
  const auto j = nlohmann::json::parse(read_file(results));
  const auto& t = j.at("tests");
  REQUIRE(t.size() == 4);
  CHECK_THAT(t[0]["output"].get<std::string>(),
             Catch::StartsWith("crashed with signal 11") && Catch::Contains("while working on word \"\"\n"));
  CHECK_THAT(t[1]["output"].get<std::string>(),
             Catch::StartsWith("threw while working on layernorm_forward on 3 x 7: not written yet"));
  const std::string hang = t[2]["output"].get<std::string>();
  CHECK_THAT(hang, Catch::StartsWith("did not finish within 1 s while working on xxx") && Catch::Contains("x...\n"));
  CHECK(hang.size() < 500);
  CHECK_THAT(t[3]["output"].get<std::string>(), !Catch::Contains("working on"));
}

TEST_CASE("chart SVGs: one mark per usable point or bar", "[labs][chart]") {
  LineChart line{"t", "x", "y", {{"a", {1, 2, 3, 4}, {1, 10, NAN, 100}}, {"b", {1, 2}, {0, 5}}}, Scale::linear, Scale::log};
  const auto svg = line_chart_svg(line);
  // Log y: NaN and 0 are left out, so 3 + 1 points.
  CHECK(count(svg, "class=\"pt\"") == 4);
  BarChart bars{"t", "y", {"g1", "g2", "g3"}, {{"s1", {}, {1, 2, 3}}, {"s2", {}, {-1, 0.5, 2}}}};
  CHECK(count(bar_chart_svg(bars), "class=\"seg\"") == 6);
  CHECK(count(line_chart_svg({"<&>", "", "", {}}), "&lt;&amp;&gt;") >= 1);  // titles are escaped
}

// The script errors a page of report/chart.h counted (data-js-errors), loaded in headless
// Chromium; -1 when the page did not set it.
static int js_errors_in_chromium(const fs::path& html, const fs::path& scratch) {
  auto dom = run_shell(fmt::format(
      "timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-background-networking "
      "--disable-component-update --disable-sync --no-first-run --user-data-dir={}/chrome-js "
      "--virtual-time-budget=5000 --dump-dom file://{}",
      scratch.string(), fs::absolute(html).string()));
  REQUIRE(dom.exit_code == 0);
  const auto at = dom.output.find("data-js-errors=\"");
  return at == std::string::npos ? -1 : std::atoi(dom.output.c_str() + at + 16);
}

TEST_CASE("charts: a log x axis fitted to the data, reference lines, bars from a baseline, numbers tables", "[labs][chart]") {
  // S 4..32 on a log axis: ticked at the data's x values, no decade ticks outside them.
  LineChart line{"speedup", "S", "x", {{"1 core", {4, 8, 16, 32}, {1.05, 1.1, 0.97, 0.9}}}, Scale::log, Scale::linear,
                 {{1.0, "even"}, {2.71, "paper"}}};
  const auto svg = line_chart_svg(line);
  auto x_tick = [](const char* v) { return fmt::format("text-anchor=\"middle\" class=\"tick\">{}</text>", v); };
  for (const char* tick : {"4", "8", "16", "32"}) CHECK(count(svg, x_tick(tick)) == 1);
  CHECK(count(svg, x_tick("1")) == 0);
  CHECK(count(svg, x_tick("100")) == 0);
  // Both reference lines are drawn: the y axis was widened to hold 2.71, far above the data.
  CHECK(count(svg, "<line class=\"ref\"") == 2);
  CHECK(count(svg, ">paper</text>") == 1);
  // The table beside it holds every point and the reference lines.
  const auto html = line_chart_html(line);
  CHECK(count(html, "<svg class=\"chart\"") == 1);
  CHECK(count(html, "<td>0.97</td>") == 1);
  CHECK(count(html, ">2.71</td>") == 1);
  // Bars from 1.0: a bar of 0.9 goes down from the baseline, one of 1.1 up, and the axis does not
  // start at zero (no "0" tick), so differences around 1 show.
  BarChart bars{"per op", "x", {"S = 8"}, {{"up", {}, {1.1}}, {"down", {}, {0.9}}}, 1.0, {}};
  const auto b = bar_chart_svg(bars);
  CHECK(count(b, "class=\"seg\"") == 2);
  CHECK(count(b, ">0</text>") == 0);
  // Heights: both bars are 0.1 from the baseline, so equally tall.
  std::vector<double> heights;
  const std::regex seg_height(R"re(class="seg"[^>]* height="([0-9.]+)")re");
  for (auto it = std::sregex_iterator(b.begin(), b.end(), seg_height); it != std::sregex_iterator(); ++it)
    heights.push_back(std::stod((*it)[1]));
  REQUIRE(heights.size() == 2);
  CHECK(heights[0] == Approx(heights[1]).epsilon(0.02));
  CHECK(count(bar_chart_html(bars), "<td>0.9</td>") == 1);
}

TEST_CASE("a lab's plots page renders its charts in headless Chromium", "[labs][chart][html]") {
  TempDir dir("labs_page");
  const lab::PlotPage page(dir.path(), "demo");
  page.add("<h2>curves</h2>\n" + line_chart_svg({"loss", "step", "loss", {{"fp32", {1, 2, 3}, {3, 2, 1.5}}}}));
  page.add(bar_chart_svg({"speed", "ms", {"forward", "backward"}, {{"yours", {}, {2, 3}}, {"bertlab", {}, {1, 1}}}}));
  const auto html = page.write("demo page");
  CHECK(html == dir / "demo.html");
  const auto charts = render_charts_in_chromium(html, dir.path());
  CHECK(charts.expected == 2);
  CHECK(charts.rendered == 2);
  CHECK(js_errors_in_chromium(html, dir.path()) == 0);
  // A script error on the page is counted.
  const lab::PlotPage broken(dir.path(), "broken");
  broken.add(line_chart_html({"loss", "step", "loss", {{"fp32", {1, 2}, {2, 1}}}}) +
             "<script>undefined_function_of_the_test();</script>\n");
  CHECK(js_errors_in_chromium(broken.write("broken page"), dir.path()) == 1);
  // A new page (a new grader run) starts empty.
  const lab::PlotPage again(dir.path(), "demo");
  CHECK(count(read_file(again.write("empty")), "<svg class=\"chart\"") == 0);
}

TEST_CASE("bertlab lab: list, unknown names, and graders that are not built", "[labs][cli]") {
  auto list = run_bertlab("lab list");
  CHECK(list.exit_code == 0);
  for (const char* name : {"profile", "kernel", "arrangement", "precision", "allreduce", "tokenize"})
    CHECK_THAT(list.output, Catch::Contains(name));
  auto unknown = run_bertlab("lab check nosuch");
  CHECK(unknown.exit_code == 1);
  CHECK_THAT(unknown.output, Catch::Contains("unknown lab 'nosuch'") && Catch::Contains("allreduce"));
  const fs::path grader = fs::path(BERTLAB_BINARY).parent_path() / "labs" / "lab_precision";
  if (!fs::exists(grader)) {  // the default configuration: the student graders are not built
    auto r = run_bertlab("lab check precision");
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains("-DBERTLAB_LABS=ON"));
  }
}

TEST_CASE("lab 3's grader draws its S and cores sweep, which renders in headless Chromium", "[labs][chart][html]") {
  // The grader built on the teachers' solution (labs/CMakeLists.txt, with the test suite).
  const fs::path grader = fs::path(BERTLAB_BINARY).parent_path() / "labs" / "lab_arrangement_solution";
  INFO("build the target lab_arrangement_solution");
  REQUIRE(fs::exists(grader));
  TempDir dir("lab_arrangement");
  const auto r = run_shell(fmt::format("{}'{}' --quick --out '{}'", BERTLAB_RUN, grader.string(), dir.path().string()));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("[INFO] S and cores on one BERT-base encoder layer"));
  const auto charts = render_charts_in_chromium(dir / "arrangement.html", dir.path());
  CHECK(charts.expected == 3);  // the layer speedup, the speedup per op, the time per op
  CHECK(charts.rendered == 3);
}

TEST_CASE("lab check --json writes Gradescope's results.json: the stubs score 0, the solution full marks", "[labs][cli]") {
  TempDir dir("lab_json");
  const fs::path stub_json = dir / "stub" / "results.json";
  fs::create_directories(stub_json.parent_path());
  const auto stub = run_grader(built_grader("lab_profile_stub"),
                               fmt::format("--quick --out '{}' --json '{}'", dir.path().string(), stub_json.string()));
  INFO(stub.output);
  CHECK(stub.exit_code == 1);
  REQUIRE(fs::exists(stub_json));
  const auto s = check_gradescope_format(stub_json);
  CHECK(s["score"].get<double>() == 0);
  CHECK(s["max_score"].get<double>() == 5);  // lab 1's five checks
  for (const auto& t : s["tests"]) CHECK(t["status"] == "failed");
  CHECK_THAT(s["output"].get<std::string>(), Catch::Contains("0 of 5 checks passed"));
  // Nothing is left beside it: the file was renamed into place.
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(stub_json.parent_path())) ++files;
  CHECK(files == 1);

  const fs::path sol_json = dir / "solution.json";
  const auto sol = run_grader(built_grader("lab_profile_solution"),
                              fmt::format("--quick --out '{}' --json '{}'", dir.path().string(), sol_json.string()));
  INFO(sol.output);
  CHECK(sol.exit_code == 0);
  const auto j = check_gradescope_format(sol_json);
  CHECK(j["score"].get<double>() == 5);
  for (const auto& t : j["tests"]) CHECK(t["status"] == "passed");
}

TEST_CASE("lab check --json with a path that cannot be written is an error naming --json, before any check", "[labs][cli]") {
  TempDir dir("lab_json_bad");
  const std::string missing_dir = (dir / "no" / "such" / "dir" / "results.json").string();
  const auto grader = run_grader(built_grader("lab_profile_stub"), fmt::format("--quick --json '{}'", missing_dir));
  INFO(grader.output);
  CHECK(grader.exit_code != 0);
  CHECK_THAT(grader.output, Catch::Contains("--json") && Catch::Contains(missing_dir));
  CHECK_THAT(grader.output, !Catch::Contains("[FAIL]"));  // refused before running the checks
  const auto cli = run_bertlab(fmt::format("lab check profile --json '{}'", missing_dir));
  CHECK(cli.exit_code == 1);
  CHECK_THAT(cli.output, Catch::Contains("--json") && Catch::Contains("directory missing or not writable"));
  const auto is_dir = run_bertlab(fmt::format("lab check profile --json '{}'", dir.path().string()));
  CHECK(is_dir.exit_code == 1);
  CHECK_THAT(is_dir.output, Catch::Contains("--json") && Catch::Contains("is a directory"));
  CHECK(fs::is_empty(dir.path()));
}

TEST_CASE("files_newer_than names the sources a built program is older than, newest first", "[labs]") {
  TempDir dir("lab_stale");
  const auto now = fs::file_time_type::clock::now();
  auto make = [&](const std::string& name, std::chrono::seconds age) {
    const fs::path p = dir / name;
    write_file_atomic(p, name);
    fs::last_write_time(p, now - age);
    return p;
  };
  const fs::path grader = make("grader", std::chrono::seconds(100));
  const fs::path old_src = make("old.cpp", std::chrono::seconds(200)), newer = make("newer.cpp", std::chrono::seconds(50)),
                 newest = make("newest.h", std::chrono::seconds(10));
  CHECK(files_newer_than(grader, {old_src}).empty());
  CHECK(files_newer_than(grader, {old_src, newer, newest}) == std::vector<fs::path>{newest, newer});
  CHECK(files_newer_than(dir / "not-built", {old_src}) == std::vector<fs::path>{old_src});
  CHECK_THROWS_WITH(files_newer_than(grader, {dir / "gone.cpp"}), Catch::Contains("gone.cpp"));
}

TEST_CASE("bertlab lab check refuses a stale grader it cannot rebuild, naming the command", "[labs][cli]") {
  // bertlab and a grader copied out of the build directory: bertlab cannot rebuild there.
  TempDir dir("lab_stale_copy");
  fs::create_directories(dir / "labs");
  fs::copy_file(BERTLAB_BINARY, dir / "bertlab");
  fs::copy_file(built_grader("lab_profile_stub"), dir / "labs" / "lab_profile");
  const fs::path source = fs::path(BERTLAB_SOURCE_DIR) / "labs" / "profile" / "student.cpp";
  fs::last_write_time(dir / "labs" / "lab_profile", fs::last_write_time(source) - std::chrono::hours(1));
  const auto r = run_shell(fmt::format("{}'{}' lab check profile", BERTLAB_RUN, (dir / "bertlab").string()));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("is newer than lab 'profile''s grader") && Catch::Contains("rebuild it first") &&
                           Catch::Contains("cmake --build") && Catch::Contains("-j2 --target lab_profile"));
  CHECK_THAT(r.output, !Catch::Contains("[FAIL]"));  // the stale grader did not run
}

TEST_CASE("bertlab lab check rebuilds the grader after the student's file changed", "[labs][cli]") {
  const fs::path grader = fs::path(BERTLAB_BINARY).parent_path() / "labs" / "lab_profile";
  if (!fs::exists(grader)) {
    WARN("lab_profile is not built (configure with -DBERTLAB_LABS=ON): the rebuild is not tested");
    return;
  }
  TempDir dir("lab_rebuild");
  const fs::path source = fs::path(BERTLAB_SOURCE_DIR) / "labs" / "profile" / "student.cpp";
  fs::last_write_time(source, fs::file_time_type::clock::now());  // touch: an edit
  REQUIRE(fs::last_write_time(source) > fs::last_write_time(grader));
  const std::string cmd = fmt::format("lab check profile -- --quick --out '{}'", dir.path().string());
  const auto first = run_bertlab(cmd);
  INFO(first.output);
  CHECK_THAT(first.output, Catch::Contains("student.cpp changed since the grader was built: rebuilding it"));
  CHECK_THAT(first.output, Catch::Contains("checks passed"));  // then it graded
  CHECK(fs::last_write_time(grader) >= fs::last_write_time(source));
  const auto second = run_bertlab(cmd);
  INFO(second.output);
  CHECK_THAT(second.output, !Catch::Contains("rebuilding"));
  CHECK(second.exit_code == first.exit_code);
}
