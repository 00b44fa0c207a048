#include "runtime/machine.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "ops/peak.h"
#include "runtime/bert_builder.h"
#include "base/error.h"
#include "base/json_file.h"

namespace bertlab {

namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
      }
    }
  }
  return "unknown";
}

std::string utc_now_iso() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t last_level_cache_bytes() {
  const int64_t l3 = ops::cpu_cache_bytes(3);
  return l3 > 0 ? l3 : ops::cpu_cache_bytes(2);
}

int64_t default_array_bytes() {
  const int64_t mb = int64_t{1} << 20;
  return std::clamp<int64_t>(4 * last_level_cache_bytes(), 256 * mb, 1024 * mb);
}

// The distinct GEMMs of a BERT-base inference graph (node name without the layer prefix),
// and the backward dX (M,K,N) and dW (N,K,M) GEMMs of each linear (M,N,K). Transposes are not
// modelled: every product is measured with plain A and prepacked B.
std::vector<GemmCalibration> bert_gemm_shapes(int64_t batch, int64_t seq) {
  RunSpec run;
  run.batch = batch;
  run.seq = seq;
  run.heads = Heads::none;
  Graph g = build_bert(BertConfig{}, run);
  std::vector<GemmCalibration> out;
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> seen;
  auto add = [&](std::string name, int64_t b, int64_t m, int64_t n, int64_t k) {
    if (seen.insert({b, m, n, k}).second) out.push_back({std::move(name), Precision::fp32, b, m, n, k, 0});
  };
  for (const auto& node : g.nodes()) {
    auto gm = node_gemm(g, node);
    if (!gm) continue;
    std::string name = node.name;
    if (name.rfind("encoder.", 0) == 0) name = name.substr(name.find('.', 8) + 1);
    add(name, gm->batch, gm->m, gm->n, gm->k);
    if (node.kind == OpKind::linear) {
      add(name + ".dX", 1, gm->m, gm->k, gm->n);
      add(name + ".dW", 1, gm->n, gm->k, gm->m);
    }
  }
  return out;
}

const nlohmann::json& field(const nlohmann::json& j, const std::string& path,
                            const std::string& origin) {
  const nlohmann::json* cur = &j;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    check(cur->is_object() && cur->contains(key),
          "{}: missing field '{}'; run `bertlab calibrate` to write a new machine.json", origin,
          path);
    cur = &cur->at(key);
    if (dot == std::string::npos) return *cur;
    start = dot + 1;
  }
}

double positive(const nlohmann::json& j, const std::string& path, const std::string& origin,
                const char* unit) {
  const auto& v = field(j, path, origin);
  check(v.is_number() && v.get<double>() > 0,
        "{}: field '{}' must be a positive number ({}), got {}; run `bertlab calibrate` to write "
        "a new machine.json",
        origin, path, unit, v.dump());
  return v.get<double>();
}

// A positive number read into the integer type T: a value past T's range (2e91 from a mutated
// file, found by fuzz_machine) is refused, where the conversion would be undefined behaviour.
template <typename T>
T positive_count(const nlohmann::json& j, const std::string& path, const std::string& origin, const char* unit) {
  const double v = positive(j, path, origin, unit);
  check(v < static_cast<double>(std::numeric_limits<T>::max()) + 1.0,
        "{}: field '{}' is {}, more than the largest value it can hold ({}); run `bertlab calibrate` to write a new "
        "machine.json",
        origin, path, field(j, path, origin).dump(), std::numeric_limits<T>::max());
  return static_cast<T>(v);
}

std::string text(const nlohmann::json& j, const std::string& path, const std::string& origin) {
  const auto& v = field(j, path, origin);
  check(v.is_string(), "{}: field '{}' must be a string, got {}; run `bertlab calibrate`", origin,
        path, v.dump());
  return v.get<std::string>();
}

}  // namespace

double MachineInfo::gemm_peak(Precision precision) const {
  switch (precision) {
    case Precision::fp32: return gemm_peak_f32;
    case Precision::bf16:
      check(gemm_peak_bf16.has_value(),
            "machine.json has no bf16 GEMM peak (this CPU has no native bf16 matmul)");
      return *gemm_peak_bf16;
  }
  return 0;
}

namespace {

// One pass over every measurement.
MachineInfo calibrate_once(const CalibrateOptions& o) {
  MachineInfo m;
  m.cpu_model = cpu_model_name();
  m.isa = ops::dnnl_isa_name();
  m.bf16 = ops::cpu_has_bf16();
  m.logical_cpus = omp_get_num_procs();
  m.threads = omp_get_max_threads();
  m.date = utc_now_iso();
  m.seconds_per_measurement = o.seconds;
  m.bandwidth_array_bytes = o.bandwidth_array_bytes > 0 ? o.bandwidth_array_bytes : default_array_bytes();

  std::vector<GemmCalibration> shapes{{"square", Precision::fp32, 1, o.square_n, o.square_n, o.square_n, 0}};
  for (auto& s : bert_gemm_shapes(o.batch, o.seq)) shapes.push_back(s);
  std::vector<Precision> precisions{Precision::fp32};
  if (m.bf16) precisions.push_back(Precision::bf16);
  for (const auto& prec : precisions)
    for (auto s : shapes) {
      s.precision = prec;
      s.gflops = ops::measure_matmul_rate({s.batch, s.m, s.n, s.k, prec == Precision::bf16}, o.seconds).gflops;
      m.gemms.push_back(s);
    }
  using ops::BandwidthKernel;
  m.bandwidth_read = ops::measure_bandwidth(BandwidthKernel::read, m.bandwidth_array_bytes, o.seconds).gbs;
  m.bandwidth_write = ops::measure_bandwidth(BandwidthKernel::write, m.bandwidth_array_bytes, o.seconds).gbs;
  m.bandwidth_triad = ops::measure_bandwidth(BandwidthKernel::triad, m.bandwidth_array_bytes, o.seconds).gbs;
  m.bandwidth_resident_array_bytes =
      o.resident_array_bytes > 0 ? o.resident_array_bytes : default_resident_array_bytes(last_level_cache_bytes());
  m.bandwidth_triad_resident = ops::measure_resident_triad(m.bandwidth_resident_array_bytes, o.seconds);
  m.parallel_region_us = ops::measure_parallel_region_seconds(o.seconds) * 1e6;
  // GELU's elements in BERT-base's FFN at the batch and sequence length of the GEMM shapes.
  m.elementwise_elements = o.batch * o.seq * BertConfig{}.intermediate_size;
  auto& rates = m.elementwise_gelem_per_s.emplace();
  for (size_t i = 0; i < rates.size(); ++i)
    rates[i] = ops::measure_elementwise_rate(ops::kElementwiseKernels[i], m.elementwise_elements, o.seconds);
  return m;
}

}  // namespace

int64_t default_resident_array_bytes(int64_t llc_bytes) {
  const int64_t kb = 1024, mb = kb * kb;
  if (llc_bytes <= 0) return 4 * mb;
  return std::clamp<int64_t>(llc_bytes / 6, 64 * kb, 4 * mb);
}

namespace {

// Why a GEMM came out faster than the square GEMM, in plain words.
std::string outlier_reason(const GemmCalibration& g, double square_gflops, int64_t l2_bytes) {
  std::string r = fmt::format(
      "faster than the large square GEMM ({:.1f} GFLOP/s), which a GEMM library runs at its best: most likely "
      "another program used the cores while the square GEMM ran, and its rate came out low (run calibrate again, "
      "with --passes 3, on a quiet machine)",
      square_gflops);
  const int64_t elem = g.precision == Precision::bf16 ? 2 : 4;
  const int64_t product_bytes = (g.m * g.k + g.k * g.n) * elem + g.m * g.n * 4;
  if (l2_bytes > 0 && product_bytes <= l2_bytes)
    r += fmt::format(
        "; also, each of its {} product{} works on {} KB, which fits in a core's {} KB L2 cache, so repeating it "
        "never waits for memory: a best case that a model's GEMMs do not reach",
        g.batch, g.batch > 1 ? "s" : "", product_bytes / 1024, l2_bytes / 1024);
  else
    r += "; or this CPU's GEMM library runs this shape better than the square one";
  return r + ". It is not used as the peak";
}

}  // namespace

CalibrationReview review_calibration(const MachineInfo& m, int64_t l2_bytes) {
  CalibrationReview r;
  auto square_of = [&](Precision p) -> std::optional<double> {
    for (const auto& g : m.gemms)
      if (g.name == kSquareGemmName && g.precision == p) return g.gflops;
    return std::nullopt;
  };
  const auto sq32 = square_of(Precision::fp32);
  check(sq32.has_value(), "calibration has no f32 '{}' GEMM: it defines the peak", kSquareGemmName);
  r.gemm_peak_f32 = *sq32;
  r.gemm_peak_bf16 = square_of(Precision::bf16);
  for (size_t i = 0; i < m.gemms.size(); ++i) {
    const auto& g = m.gemms[i];
    const auto sq = square_of(g.precision);
    if (g.name == kSquareGemmName || !sq || *sq <= 0) continue;
    if (g.gflops > kGemmOutlierFactor * *sq) r.outliers.push_back({i, g.gflops / *sq, outlier_reason(g, *sq, l2_bytes)});
  }
  if (m.bandwidth_triad_resident && *m.bandwidth_triad_resident < m.bandwidth_triad) {
    r.resident_below_dram = true;
    r.resident_note = fmt::format(
        "the cache-resident triad ({:.1f} GB/s) came out below the DRAM triad ({:.1f} GB/s). Data that stays in the "
        "cache cannot be slower to reach than data in main memory, so this measurement was disturbed, most likely by "
        "another program using the cores while it ran. machine.json leaves it out and the models use the DRAM triad "
        "in its place; run calibrate again on a quiet machine (or with --passes 3) to measure it",
        *m.bandwidth_triad_resident, m.bandwidth_triad);
  }
  return r;
}

MachineInfo calibrate_machine(const CalibrateOptions& o, CalibrationReview* review) {
  check(o.seconds > 0, "calibration time per measurement must be positive, got {}", o.seconds);
  check(o.square_n > 0, "square GEMM size must be positive, got {}", o.square_n);
  check(o.passes >= 1, "calibration passes must be at least 1, got {}", o.passes);
  MachineInfo m = calibrate_once(o);
  // Interference from other processes only ever slows a measurement down, so of several whole
  // passes (whole passes rather than repeats back to back, so that a busy spell of the machine
  // hits different measurements in each) each figure keeps its best: the highest rate, the
  // lowest parallel-region cost.
  for (int pass = 1; pass < o.passes; ++pass) {
    const MachineInfo next = calibrate_once(o);
    for (size_t i = 0; i < m.gemms.size(); ++i) m.gemms[i].gflops = std::max(m.gemms[i].gflops, next.gemms[i].gflops);
    m.bandwidth_read = std::max(m.bandwidth_read, next.bandwidth_read);
    m.bandwidth_write = std::max(m.bandwidth_write, next.bandwidth_write);
    m.bandwidth_triad = std::max(m.bandwidth_triad, next.bandwidth_triad);
    m.bandwidth_triad_resident = std::max(*m.bandwidth_triad_resident, *next.bandwidth_triad_resident);
    m.parallel_region_us = std::min(*m.parallel_region_us, *next.parallel_region_us);
    for (size_t i = 0; i < m.elementwise_gelem_per_s->size(); ++i)
      (*m.elementwise_gelem_per_s)[i] = std::max((*m.elementwise_gelem_per_s)[i], (*next.elementwise_gelem_per_s)[i]);
  }
  m.passes = o.passes;
  CalibrationReview r = review_calibration(m, ops::cpu_cache_bytes(2));
  m.gemm_peak_f32 = r.gemm_peak_f32;
  m.gemm_peak_bf16 = r.gemm_peak_bf16;
  if (r.resident_below_dram) {
    m.bandwidth_triad_resident.reset();
    m.bandwidth_resident_array_bytes = 0;
  }
  if (review) *review = std::move(r);
  return m;
}

nlohmann::json machine_to_json(const MachineInfo& m) {
  nlohmann::json gemms = nlohmann::json::array();
  for (const auto& g : m.gemms)
    gemms.push_back({{"name", g.name}, {"precision", file_key(g.precision)}, {"batch", g.batch},
                     {"m", g.m}, {"n", g.n}, {"k", g.k}, {"gflops", g.gflops}});
  nlohmann::json bandwidth = {{"read", m.bandwidth_read}, {"write", m.bandwidth_write}, {"triad", m.bandwidth_triad}};
  if (m.bandwidth_triad_resident) bandwidth["triad_resident"] = *m.bandwidth_triad_resident;
  nlohmann::json j = {{"format", "bertlab-machine"},
          {"version", kMachineFormatVersion},
          {"cpu", {{"model", m.cpu_model}, {"isa", m.isa}, {"bf16", m.bf16}, {"logical_cpus", m.logical_cpus}}},
          {"threads", m.threads},
          {"date", m.date},
          {"gemm_peak_gflops",
           {{"f32", m.gemm_peak_f32},
            {"bf16", m.gemm_peak_bf16 ? nlohmann::json(*m.gemm_peak_bf16) : nlohmann::json(nullptr)}}},
          {"bandwidth_gbs", bandwidth},
          {"gemms", gemms},
          {"bandwidth_array_bytes", m.bandwidth_array_bytes},
          {"seconds_per_measurement", m.seconds_per_measurement}};
  if (m.bandwidth_triad_resident) j["bandwidth_resident_array_bytes"] = m.bandwidth_resident_array_bytes;
  if (m.parallel_region_us) j["parallel_region_us"] = *m.parallel_region_us;
  if (m.elementwise_gelem_per_s) {
    j["elementwise_gelem_per_s"] = elementwise_rates_json(*m.elementwise_gelem_per_s);
    j["elementwise_elements"] = m.elementwise_elements;
  }
  if (m.passes > 1) j["passes"] = m.passes;
  return j;
}

nlohmann::json elementwise_rates_json(const ops::ElementwiseRates& rates) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < rates.size(); ++i) j[ops::to_string(ops::kElementwiseKernels[i])] = rates[i];
  return j;
}

MachineInfo machine_from_json(const nlohmann::json& j, const std::string& origin) {
  // value() with a json default: a "format" or "version" of another JSON type compares unequal
  // (a string default made nlohmann throw type_error on an array; fuzz_machine crash-d6fc61e9).
  check(j.is_object() && j.value("format", nlohmann::json()) == "bertlab-machine",
        "{}: not a bertlab machine description (expected \"format\": \"bertlab-machine\"); run "
        "`bertlab calibrate` to write one",
        origin);
  check(j.value("version", nlohmann::json()) == kMachineFormatVersion,
        "{}: machine.json version {} is not supported (expected {}); run `bertlab calibrate` again",
        origin, j.value("version", nlohmann::json(nullptr)).dump(), kMachineFormatVersion);
  MachineInfo m;
  m.cpu_model = text(j, "cpu.model", origin);
  m.isa = text(j, "cpu.isa", origin);
  const auto& bf16 = field(j, "cpu.bf16", origin);
  check(bf16.is_boolean(), "{}: field 'cpu.bf16' must be true or false; run `bertlab calibrate`", origin);
  m.bf16 = bf16.get<bool>();
  m.logical_cpus = positive_count<int>(j, "cpu.logical_cpus", origin, "a count");
  m.threads = positive_count<int>(j, "threads", origin, "a count");
  m.date = text(j, "date", origin);
  m.gemm_peak_f32 = positive(j, "gemm_peak_gflops.f32", origin, "GFLOP/s");
  if (!field(j, "gemm_peak_gflops.bf16", origin).is_null())
    m.gemm_peak_bf16 = positive(j, "gemm_peak_gflops.bf16", origin, "GFLOP/s or null");
  m.bandwidth_read = positive(j, "bandwidth_gbs.read", origin, "GB/s");
  m.bandwidth_write = positive(j, "bandwidth_gbs.write", origin, "GB/s");
  m.bandwidth_triad = positive(j, "bandwidth_gbs.triad", origin, "GB/s");
  m.bandwidth_array_bytes = positive_count<int64_t>(j, "bandwidth_array_bytes", origin, "bytes");
  m.seconds_per_measurement = positive(j, "seconds_per_measurement", origin, "seconds");
  // Later additions: optional, so machine.json files written before them still load.
  if (j.at("bandwidth_gbs").contains("triad_resident")) {
    m.bandwidth_triad_resident = positive(j, "bandwidth_gbs.triad_resident", origin, "GB/s");
    m.bandwidth_resident_array_bytes =
        positive_count<int64_t>(j, "bandwidth_resident_array_bytes", origin, "bytes");
  }
  if (j.contains("passes")) m.passes = positive_count<int>(j, "passes", origin, "a count");
  if (j.contains("parallel_region_us"))
    m.parallel_region_us = positive(j, "parallel_region_us", origin, "microseconds");
  if (j.contains("elementwise_gelem_per_s")) {
    auto& rates = m.elementwise_gelem_per_s.emplace();
    // A kernel added after the file was written (a newly rated activation) is not calibrated
    // in it: rate 0, priced by its bytes, until `bertlab calibrate` runs again.
    for (size_t i = 0; i < rates.size(); ++i) {
      const std::string key = ops::to_string(ops::kElementwiseKernels[i]);
      if (j.at("elementwise_gelem_per_s").contains(key))
        rates[i] = positive(j, fmt::format("elementwise_gelem_per_s.{}", key), origin, "1e9 elements per second");
    }
    m.elementwise_elements = positive_count<int64_t>(j, "elementwise_elements", origin, "a count");
  }
  const auto& gemms = field(j, "gemms", origin);
  check(gemms.is_array(), "{}: field 'gemms' must be a list; run `bertlab calibrate`", origin);
  for (size_t i = 0; i < gemms.size(); ++i) {
    const auto& g = gemms[i];
    const auto dim = [&](const char* key) {
      check(g.is_object() && g.contains(key), "{}: gemms[{}] has no '{}'; run `bertlab calibrate`", origin, i, key);
      return positive_count<int64_t>(g, key, fmt::format("{}: gemms[{}]", origin, i), "GEMM dimension");
    };
    try {
      m.gemms.push_back({g.at("name").get<std::string>(),
                         precision_from_string(g.at("precision").get<std::string>(),
                                               fmt::format("{}: gemms[{}].precision", origin, i)),
                         dim("batch"), dim("m"), dim("n"), dim("k"), g.at("gflops").get<double>()});
    } catch (const nlohmann::json::exception& e) {
      fail("{}: gemms[{}] is malformed ({}); expected name, precision, batch, m, n, k, gflops; "
           "run `bertlab calibrate`",
           origin, i, e.what());
    }
  }
  return m;
}

MachineInfo load_machine(const std::filesystem::path& file) {
  const auto j = read_json_file(file, "machine description",
                                "; run `bertlab calibrate` (it writes machine.json), or pass --machine FILE");
  return machine_from_json(j, file.string());
}

}  // namespace bertlab
