#include "hwmodel/system.h"

#include "hwmodel/json_fields.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iterator>
#include <optional>
#include <type_traits>
#include <utility>

#include "base/error.h"
#include "base/json_file.h"
#include "runtime/machine.h"

namespace bertlab::hw {

namespace {

using nlohmann::json;

// SCALE-Sim's long names of the dataflows (the table's third column), read as the short ones.
#define BERTLAB_DATAFLOW_LONG_NAME(id, name, long_name) long_name,
constexpr std::array<const char*, enum_count<Dataflow>> kDataflowLongNames{BERTLAB_DATAFLOWS(BERTLAB_DATAFLOW_LONG_NAME)};
#undef BERTLAB_DATAFLOW_LONG_NAME

std::string dataflow_alias(const std::string& s) {
  for (size_t i = 0; i < kDataflowLongNames.size(); ++i)
    if (s == kDataflowLongNames[i]) return to_string(static_cast<Dataflow>(i));
  return s;
}

// array.scalesim_memory: every field optional (SCALE-Sim's configs/scale.cfg values), none unknown.
ScaleSimMemoryDesc scalesim_memory_from(const json& j, const std::string& origin) {
  const std::string path = "array.scalesim_memory";
  check(j.is_object(), "{}: field '{}' must be an object, got {}", origin, path, j.dump());
  static constexpr const char* kKeys[] = {"ifmap_sram_kb", "filter_sram_kb", "ofmap_sram_kb",
                                          "bandwidth_words_per_cycle", "stall_double_count"};
  for (const auto& [key, value] : j.items())
    check(std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys),
          "{}: unknown field '{}.{}' (expected {})", origin, path, key, fmt::join(kKeys, ", "));
  ScaleSimMemoryDesc m;
  m.ifmap_sram_kb = field_or<int64_t>(j, "ifmap_sram_kb", m.ifmap_sram_kb, path, origin);
  m.filter_sram_kb = field_or<int64_t>(j, "filter_sram_kb", m.filter_sram_kb, path, origin);
  m.ofmap_sram_kb = field_or<int64_t>(j, "ofmap_sram_kb", m.ofmap_sram_kb, path, origin);
  m.bandwidth_words_per_cycle = field_or<int64_t>(j, "bandwidth_words_per_cycle", m.bandwidth_words_per_cycle, path, origin);
  m.stall_double_count = field_or<bool>(j, "stall_double_count", m.stall_double_count, path, origin);
  return m;
}

CacheDesc cache_from(const json& j, const std::string& path, const std::string& origin) {
  check_known_fields(
      j, {"size_bytes", "ways", "line_bytes", "hit_cycles", "tag_cycles", "response_cycles", "hashed_index", "exact_sets"},
      path, origin);
  CacheDesc c;
  c.size_bytes = field<int64_t>(j, "size_bytes", path, origin);
  c.ways = field<int64_t>(j, "ways", path, origin);
  c.line_bytes = field<int64_t>(j, "line_bytes", path, origin);
  c.hit_cycles = field_or<double>(j, "hit_cycles", 0, path, origin);
  c.tag_cycles = field_or<double>(j, "tag_cycles", 0, path, origin);
  c.response_cycles = field_or<double>(j, "response_cycles", 0, path, origin);
  c.hashed_index = field_or<bool>(j, "hashed_index", false, path, origin);
  c.exact_sets = field_or<bool>(j, "exact_sets", false, path, origin);
  return c;
}

json cache_to(const CacheDesc& c) {
  return {{"size_bytes", c.size_bytes}, {"ways", c.ways},       {"line_bytes", c.line_bytes},
          {"hit_cycles", c.hit_cycles}, {"tag_cycles", c.tag_cycles},     {"response_cycles", c.response_cycles},
          {"hashed_index", c.hashed_index}, {"exact_sets", c.exact_sets}};
}

bool pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

void validate_cache(const CacheDesc& c, const std::string& what, const std::string& origin) {
  check(c.line_bytes > 0 && pow2(c.line_bytes), "{}: '{}.line_bytes' must be a power of two, got {}",
        origin, what, c.line_bytes);
  check(c.size_bytes >= c.line_bytes,
        "{}: '{}.size_bytes' ({}) is smaller than one line ({} bytes)", origin, what, c.size_bytes,
        c.line_bytes);
  check(c.ways >= 1, "{}: '{}.ways' must be at least 1, got {}", origin, what, c.ways);
  check(c.size_bytes % (c.line_bytes * c.ways) == 0,
        "{}: '{}.size_bytes' ({}) is not a multiple of ways x line ({} x {})", origin, what,
        c.size_bytes, c.ways, c.line_bytes);
  check(!c.hashed_index || pow2(c.sets()),
        "{}: '{}.hashed_index' needs a power-of-two number of sets, got {}", origin, what, c.sets());
  check(c.hit_cycles >= 0, "{}: '{}.hit_cycles' must not be negative", origin, what);
}

// A CPU described by what `bertlab calibrate` measured (runtime/machine.h): the GEMM
// peaks per precision and the rates of the BERT-shaped GEMMs, the triad bandwidth (reads and
// writes mixed, as node_min_bytes counts them) over DRAM-sized and cache-resident arrays, the
// cost of a parallel region and the thread count. The last two measurements are absent from
// older machine.json files: the model then goes without them. Caches are not measured;
// typical values stand in.
void apply_machine(SystemDesc& s, const MachineInfo& m, const std::string& origin) {
  s.kind = SystemKind::cpu;
  s.name = fmt::format("this CPU: {} ({} threads, calibrated {}, from {})", m.cpu_model, m.threads, m.date, origin);
  s.cores = m.threads;
  s.gemm_peak_gflops = json{{"f32", m.gemm_peak_f32}};
  if (m.gemm_peak_bf16) s.gemm_peak_gflops["bf16"] = *m.gemm_peak_bf16;
  s.dram.peak_gbps = m.bandwidth_triad;
  s.gemm_rates = m.gemms;
  s.resident_gbps = m.bandwidth_triad_resident.value_or(0);
  s.parallel_region_seconds = m.parallel_region_us.value_or(0) * 1e-6;
  if (m.elementwise_gelem_per_s) s.elementwise_gelem_per_s = *m.elementwise_gelem_per_s;
}

SystemDesc from_machine(const json& j, const std::string& origin) {
  SystemDesc s;
  s.clock_ghz = 1.0;
  s.l1 = {32768, 8, 64, 4, false};
  s.llc = {1 << 20, 16, 64, 40, false};
  s.elem_bytes = 4;
  apply_machine(s, machine_from_json(j, origin), origin);
  return s;
}

// A "machine" field of a cpu description names the machine.json to read: as given (relative
// to the working directory), else beside the description.
std::optional<std::filesystem::path> find_machine(const std::string& name, const std::string& origin) {
  const std::filesystem::path p(name);
  if (std::filesystem::exists(p)) return p;
  const auto beside = std::filesystem::path(origin).parent_path() / p;
  if (p.is_relative() && std::filesystem::exists(beside)) return beside;
  return std::nullopt;
}

}  // namespace

SystemDesc system_from_json(const json& j, const std::string& origin) {
  check(j.is_object(), "{}: a system description must be a JSON object", origin);
  const std::string format = field_or<std::string>(j, "format", "", "", origin);
  const int version = field_or<int>(j, "version", -1, "", origin);
  if (format == "bertlab-machine") {
    check(version == 1, "{}: machine.json version {} is not supported (expected 1)", origin, version);
    SystemDesc s = from_machine(j, origin);
    validate(s, origin);
    return s;
  }
  check(format == "bertlab-system",
        "{}: field 'format' must be \"bertlab-system\" or \"bertlab-machine\", got \"{}\"", origin,
        format);
  check(version == 1, "{}: system description version {} is not supported (expected 1)", origin,
        version);
  SystemDesc s;
  s.name = field_or<std::string>(j, "name", origin, "", origin);
  s.kind = enum_field_or(j, "kind", SystemKind::accelerator, "", origin);
  // A field of the other kind's descriptions is named as such; any other unknown field with the
  // nearest known one.
  static constexpr const char* kCommon[] = {"format", "version", "name", "kind", "cores", "clock_ghz", "elem_bytes",
                                            "pad_to_kernel", "rwma_block_rows", "core", "tlb", "l1", "llc", "llc_bus", "dram"};
  static constexpr const char* kCpuOnly[] = {"machine", "precision", "gemm_peak_gflops", "cpu_model", "resident_gbps",
                                             "parallel_region_us", "elementwise_gelem_per_s"};
  static constexpr const char* kAcceleratorOnly[] = {"array", "operand_offset_bytes", "qkv"};
  const bool cpu = s.kind == SystemKind::cpu;
  auto list = [](const auto& a) { return std::vector<const char*>(std::begin(a), std::end(a)); };
  const std::vector<const char*> own = cpu ? list(kCpuOnly) : list(kAcceleratorOnly);
  const std::vector<const char*> other = cpu ? list(kAcceleratorOnly) : list(kCpuOnly);
  for (const char* k : other)
    check(!j.contains(k), "{}: field '{}' belongs to {} descriptions, and this one is kind '{}'", origin, k,
          cpu ? "accelerator" : "cpu", to_string(s.kind));
  std::vector<const char*> known = list(kCommon);
  known.insert(known.end(), own.begin(), own.end());
  check_known_fields(j, known, "", origin);
  s.cores = field<int64_t>(j, "cores", "", origin);
  s.clock_ghz = field<double>(j, "clock_ghz", "", origin);
  s.elem_bytes = field_or<int64_t>(j, "elem_bytes", 1, "", origin);
  s.pad_to_kernel = field_or<bool>(j, "pad_to_kernel", true, "", origin);
  s.rwma_block_rows = field_or<int64_t>(j, "rwma_block_rows", 128, "", origin);
  s.operand_offset_bytes = field_or<int64_t>(j, "operand_offset_bytes", 0, "", origin);
  s.qkv = enum_field_or(j, "qkv", QkvSchedule::fused, "", origin);
  const json core = field_or<json>(j, "core", json::object(), "", origin);
  check_known_fields(core, {"flops_per_cycle", "overlap", "memory_parallelism", "isa", "issue_width", "walk"}, "core",
                     origin);
  s.core_flops_per_cycle = field_or<double>(core, "flops_per_cycle", 1, "core", origin);
  s.overlap = field_or<double>(core, "overlap", 0, "core", origin);
  s.memory_parallelism = field_or<double>(core, "memory_parallelism", 1, "core", origin);
  s.core_isa = enum_field_or(core, "isa", CoreIsa::aarch64, "core", origin);
  s.issue_width = field_or<double>(core, "issue_width", 1, "core", origin);
  s.core_walk = enum_field_or(core, "walk", CoreWalk::exact, "core", origin);
  check(std::isfinite(s.issue_width) && s.issue_width >= 1 && s.issue_width <= 16,
        "{}: field 'core.issue_width' must be a number of instructions per cycle in 1..16, got {}", origin,
        s.issue_width);
  if (s.kind == SystemKind::cpu) {
    s.gemm_peak_gflops = field<json>(j, "gemm_peak_gflops", "", origin);
    s.precision = precision_from_string(field_or<std::string>(j, "precision", "f32", "", origin),
                                        origin + ": field 'precision'");
    s.cpu_model = enum_field_or(j, "cpu_model", CpuModel::calibrated, "", origin);
    s.resident_gbps = field_or<double>(j, "resident_gbps", 0, "", origin);
    s.parallel_region_seconds = field_or<double>(j, "parallel_region_us", 0, "", origin) * 1e-6;
    const json rates = field_or<json>(j, "elementwise_gelem_per_s", json::object(), "", origin);
    for (size_t i = 0; i < s.elementwise_gelem_per_s.size(); ++i)
      s.elementwise_gelem_per_s[i] =
          field_or<double>(rates, ops::to_string(ops::kElementwiseKernels[i]), 0, "elementwise_gelem_per_s", origin);
  } else {
    const json a = field<json>(j, "array", "", origin);
    check_known_fields(a, {"kernel", "dataflow", "compute_model", "bytes_per_issue", "cycles_per_issue",
                           "output_cycles_per_issue", "scalesim_memory"},
                       "array", origin);
    s.array.kernel = field<int64_t>(a, "kernel", "array", origin);
    s.array.dataflow = enum_field_or(a, "dataflow", Dataflow::ws, "array", origin, dataflow_alias);
    check(field_or<std::string>(a, "compute_model", "", "array", origin) != "tightly_coupled",
          "{}: field 'array.compute_model': 'tightly_coupled' is no longer a model; the paper's tightly coupled "
          "cores are 'in_order_core' (instructions, array issues and cache misses of TiC-SAT's schedules), the "
          "array-issue-only model is 'loosely_coupled'",
          origin);
    s.array.compute_model = enum_field_or(a, "compute_model", ComputeModel::in_order_core, "array", origin);
    s.array.bytes_per_issue = field_or<int64_t>(a, "bytes_per_issue", 4, "array", origin);
    s.array.cycles_per_issue = field_or<double>(a, "cycles_per_issue", 1, "array", origin);
    s.array.output_cycles_per_issue = field_or<double>(a, "output_cycles_per_issue", 1, "array", origin);
    if (a.contains("scalesim_memory")) s.array.scalesim_memory = scalesim_memory_from(a.at("scalesim_memory"), origin);
  }
  s.l1 = cache_from(field<json>(j, "l1", "", origin), "l1", origin);
  s.llc = cache_from(field<json>(j, "llc", "", origin), "llc", origin);
  if (j.contains("llc_bus")) {
    const json b = field<json>(j, "llc_bus", "", origin);
    check_known_fields(b, {"forward_cycles", "response_cycles"}, "llc_bus", origin);
    s.llc_bus.forward_cycles = field_or<double>(b, "forward_cycles", 0, "llc_bus", origin);
    s.llc_bus.response_cycles = field_or<double>(b, "response_cycles", 0, "llc_bus", origin);
  }
  if (j.contains("tlb")) {
    const json t = field<json>(j, "tlb", "", origin);
    check_known_fields(t, {"entries", "ways", "page_bytes", "walk_levels"}, "tlb", origin);
    s.tlb.entries = field<int64_t>(t, "entries", "tlb", origin);
    s.tlb.ways = field_or<int64_t>(t, "ways", 0, "tlb", origin);
    s.tlb.page_bytes = field_or<int64_t>(t, "page_bytes", 4096, "tlb", origin);
    s.tlb.walk_levels = field_or<int64_t>(t, "walk_levels", 4, "tlb", origin);
  }
  const json d = field<json>(j, "dram", "", origin);
  check_known_fields(d, {"channels", "peak_gbps", "burst_bytes", "row_bytes", "banks", "row_hit_ns", "row_miss_ns"},
                     "dram", origin);
  s.dram.channels = field_or<int64_t>(d, "channels", 1, "dram", origin);
  s.dram.peak_gbps = field<double>(d, "peak_gbps", "dram", origin);
  s.dram.burst_bytes = field_or<int64_t>(d, "burst_bytes", 64, "dram", origin);
  s.dram.row_bytes = field_or<int64_t>(d, "row_bytes", 8192, "dram", origin);
  s.dram.banks = field_or<int64_t>(d, "banks", 16, "dram", origin);
  s.dram.row_hit_ns = field_or<double>(d, "row_hit_ns", 15, "dram", origin);
  s.dram.row_miss_ns = field_or<double>(d, "row_miss_ns", 45, "dram", origin);
  if (s.kind == SystemKind::cpu && j.contains("machine")) {
    const std::string name = field<std::string>(j, "machine", "", origin);
    if (const auto path = find_machine(name, origin))
      apply_machine(s, load_machine(*path), path->string());
    else
      s.name += fmt::format(" [{} not found: run `bertlab calibrate`; placeholder values]", name);
  }
  validate(s, origin);
  return s;
}

void validate(const SystemDesc& s, const std::string& origin) {
  const int64_t max_cores = s.kind == SystemKind::cpu ? kMaxCpuCores : kMaxAcceleratorCores;
  check(s.cores >= 1 && s.cores <= max_cores, "{}: field 'cores' must be in 1..{} for a{} {} description, got {}",
        origin, max_cores, s.kind == SystemKind::cpu ? "" : "n", to_string(s.kind), s.cores);
  check(s.clock_ghz > 0, "{}: field 'clock_ghz' must be positive, got {}", origin, s.clock_ghz);
  check(s.elem_bytes == 1 || s.elem_bytes == 2 || s.elem_bytes == 4,
        "{}: field 'elem_bytes' must be 1, 2 or 4, got {}", origin, s.elem_bytes);
  check(s.dram.peak_gbps > 0, "{}: field 'dram.peak_gbps' must be positive, got {}", origin,
        s.dram.peak_gbps);
  check(s.overlap >= 0 && s.overlap <= 1, "{}: field 'core.overlap' must be in [0, 1], got {}",
        origin, s.overlap);
  check(s.memory_parallelism >= 1, "{}: field 'core.memory_parallelism' must be >= 1, got {}",
        origin, s.memory_parallelism);
  check(s.core_flops_per_cycle > 0, "{}: field 'core.flops_per_cycle' must be positive", origin);
  validate_cache(s.l1, "l1", origin);
  validate_cache(s.llc, "llc", origin);
  // Beyond these ranges a value describes no system, and products of it overflow (a 1e308-cycle
  // hit made an inf time and a nan speedup; a 1e-300 GHz clock a 1e296 ms node).
  struct Range {
    const char* field;
    double value, lo, hi;
  };
  const Range ranges[] = {{"clock_ghz", s.clock_ghz, 1e-3, 1e3},
                          {"dram.peak_gbps", s.dram.peak_gbps, 1e-3, 1e6},
                          {"dram.row_hit_ns", s.dram.row_hit_ns, 0, 1e6},
                          {"dram.row_miss_ns", s.dram.row_miss_ns, 0, 1e6},
                          {"l1.hit_cycles", s.l1.hit_cycles, 0, 1e6},
                          {"llc.hit_cycles", s.llc.hit_cycles, 0, 1e6},
                          {"l1.tag_cycles", s.l1.tag_cycles, 0, 1e6},
                          {"l1.response_cycles", s.l1.response_cycles, 0, 1e6},
                          {"llc.response_cycles", s.llc.response_cycles, 0, 1e6},
                          {"llc_bus.forward_cycles", s.llc_bus.forward_cycles, 0, 1e6},
                          {"llc_bus.response_cycles", s.llc_bus.response_cycles, 0, 1e6},
                          {"core.flops_per_cycle", s.core_flops_per_cycle, 1e-6, 1e6},
                          {"core.memory_parallelism", s.memory_parallelism, 1, 1e6},
                          {"array.cycles_per_issue", s.array.cycles_per_issue, 1e-6, 1e6},
                          {"array.output_cycles_per_issue", s.array.output_cycles_per_issue, 1e-6, 1e6},
                          {"resident_gbps", s.resident_gbps, 0, 1e6}};
  check(s.llc.tag_cycles == 0,
        "{}: field 'llc.tag_cycles' is not used: an LLC miss is found in its hit_cycles (gem5's lookup of a "
        "parallel-access cache, max(tag, data) = the tag latency when they are equal); set llc.hit_cycles and "
        "llc.response_cycles",
        origin);
  for (const Range& r : ranges)
    check(std::isfinite(r.value) && r.value >= r.lo && r.value <= r.hi, "{}: field '{}' must be in {:g}..{:g}, got {}",
          origin, r.field, r.lo, r.hi, r.value);
  const TlbDesc& t = s.tlb;
  check(t.entries >= 0 && t.entries <= 65536, "{}: field 'tlb.entries' must be in 0..65536, got {}", origin, t.entries);
  check(t.ways >= 0 && (t.ways == 0 || t.entries % t.ways == 0),
        "{}: field 'tlb.ways' must be 0 (fully associative) or divide tlb.entries ({}), got {}", origin, t.entries,
        t.ways);
  check(pow2(t.page_bytes) && t.page_bytes >= s.l1.line_bytes && t.page_bytes <= (int64_t{1} << 30),
        "{}: field 'tlb.page_bytes' must be a power of two from a line ({}) to 1 GB, got {}", origin, s.l1.line_bytes,
        t.page_bytes);
  check(t.walk_levels >= 1 && t.walk_levels <= 5, "{}: field 'tlb.walk_levels' must be in 1..5, got {}", origin,
        t.walk_levels);
  check(t.entries == 0 || pow2(t.sets()),
        "{}: 'tlb.entries' / 'tlb.ways' must be a power-of-two number of sets, got {} / {}", origin, t.entries, t.ways);
  check(s.l1.line_bytes == s.llc.line_bytes,
        "{}: 'l1.line_bytes' ({}) and 'llc.line_bytes' ({}) must be equal", origin,
        s.l1.line_bytes, s.llc.line_bytes);
  if (s.kind == SystemKind::cpu) {
    check(s.resident_gbps >= 0, "{}: field 'resident_gbps' must not be negative, got {}", origin, s.resident_gbps);
    check(s.parallel_region_seconds >= 0, "{}: field 'parallel_region_us' must not be negative", origin);
    for (size_t i = 0; i < s.elementwise_gelem_per_s.size(); ++i)
      check(s.elementwise_gelem_per_s[i] >= 0, "{}: field 'elementwise_gelem_per_s.{}' must not be negative, got {}",
            origin, ops::to_string(ops::kElementwiseKernels[i]), s.elementwise_gelem_per_s[i]);
    for (const auto& r : s.gemm_rates)
      check(r.gflops > 0 && r.batch >= 1 && r.m >= 1 && r.n >= 1 && r.k >= 1,
            "{}: measured GEMM '{}' ({}, batch {} m {} n {} k {}) needs positive dimensions and GFLOP/s, got {}",
            origin, r.name, file_key(r.precision), r.batch, r.m, r.n, r.k, r.gflops);
    const char* key = file_key(s.precision);
    check(s.gemm_peak_gflops.is_object() && s.gemm_peak_gflops.contains(key) &&
              s.gemm_peak_gflops.at(key).is_number() && s.gemm_peak_gflops.at(key).get<double>() > 0,
          "{}: field 'gemm_peak_gflops.{}' must be a positive number", origin, key);
    return;
  }
  const auto& a = s.array;
  check(a.kernel >= 1 && a.kernel <= 4096, "{}: field 'array.kernel' must be in 1..4096, got {}",
        origin, a.kernel);
  check(a.compute_model == ComputeModel::scalesim || a.dataflow == Dataflow::ws,
        "{}: 'array.compute_model' {} models the weight-stationary array of the "
        "paper; dataflow '{}' needs compute_model scalesim",
        origin, to_string(a.compute_model), to_string(a.dataflow));
  check(a.compute_model != ComputeModel::in_order_core || a.kernel == 4 || a.kernel == 8 || a.kernel == 16 ||
            a.kernel == 32,
        "{}: field 'array.kernel' is {}: the in_order_core model has instruction counts of TiC-SAT's kernels for "
        "S = 4, 8, 16 and 32 only (use one of them, or compute_model loosely_coupled)",
        origin, a.kernel);
  check(a.compute_model != ComputeModel::in_order_core || s.elem_bytes <= a.bytes_per_issue,
        "{}: field 'elem_bytes' is {}: the in_order_core model streams words of 'array.bytes_per_issue' ({}) "
        "bytes holding whole elements",
        origin, s.elem_bytes, a.bytes_per_issue);
  check(a.bytes_per_issue >= 1, "{}: field 'array.bytes_per_issue' must be >= 1", origin);
  check((a.kernel * s.elem_bytes) % a.bytes_per_issue == 0 || a.compute_model == ComputeModel::scalesim,
        "{}: a kernel row of {} x {} bytes does not divide into issues of {} bytes "
        "('array.bytes_per_issue')",
        origin, a.kernel, s.elem_bytes, a.bytes_per_issue);
  check(a.cycles_per_issue > 0, "{}: field 'array.cycles_per_issue' must be positive, got {}", origin,
        a.cycles_per_issue);
  // Every popped output word is at least one core instruction (tightly coupled array).
  check(a.output_cycles_per_issue > 0, "{}: field 'array.output_cycles_per_issue' must be positive, got {}",
        origin, a.output_cycles_per_issue);
  if (const auto& m = a.scalesim_memory) {
    check(a.compute_model == ComputeModel::scalesim,
          "{}: field 'array.scalesim_memory' is SCALE-Sim's memory system and needs 'array.compute_model' "
          "scalesim, got {}",
          origin, to_string(a.compute_model));
    // Up to 1 GB per SRAM and 2^20 words per cycle: counts stay far inside int64.
    const std::pair<const char*, int64_t> sizes[] = {{"ifmap_sram_kb", m->ifmap_sram_kb},
                                                     {"filter_sram_kb", m->filter_sram_kb},
                                                     {"ofmap_sram_kb", m->ofmap_sram_kb}};
    for (const auto& [key, kb] : sizes)
      check(kb >= 1 && kb <= (int64_t{1} << 20),
            "{}: field 'array.scalesim_memory.{}' must be a whole number of kB in 1..1048576, got {}", origin, key, kb);
    check(m->bandwidth_words_per_cycle >= 1 && m->bandwidth_words_per_cycle <= (int64_t{1} << 20),
          "{}: field 'array.scalesim_memory.bandwidth_words_per_cycle' must be a whole number of words in "
          "1..1048576, got {}",
          origin, m->bandwidth_words_per_cycle);
  }
  check(s.rwma_block_rows >= 1, "{}: field 'rwma_block_rows' must be >= 1", origin);
  const auto& d = s.dram;
  check(d.channels >= 1, "{}: field 'dram.channels' must be >= 1", origin);
  check(d.burst_bytes >= 1 && s.llc.line_bytes % d.burst_bytes == 0,
        "{}: 'dram.burst_bytes' ({}) must divide the line size ({})", origin, d.burst_bytes,
        s.llc.line_bytes);
  check(d.row_bytes >= s.llc.line_bytes && d.row_bytes % s.llc.line_bytes == 0,
        "{}: 'dram.row_bytes' ({}) must be a multiple of the line size ({})", origin, d.row_bytes,
        s.llc.line_bytes);
  check(d.banks >= 1, "{}: field 'dram.banks' must be >= 1", origin);
  check(d.row_hit_ns >= 0 && d.row_miss_ns >= d.row_hit_ns,
        "{}: 'dram.row_miss_ns' ({}) must be >= 'dram.row_hit_ns' ({}) >= 0", origin, d.row_miss_ns,
        d.row_hit_ns);
  // What only the in-order core model describes (its placement and TiC-SAT's projections).
  check(s.operand_offset_bytes >= 0 && s.operand_offset_bytes < s.tlb.page_bytes &&
            s.operand_offset_bytes < s.dram.row_bytes && s.operand_offset_bytes % s.elem_bytes == 0,
        "{}: field 'operand_offset_bytes' must be a multiple of elem_bytes ({}) below the page ({} bytes) and the "
        "DRAM row ({} bytes), got {}",
        origin, s.elem_bytes, s.tlb.page_bytes, s.dram.row_bytes, s.operand_offset_bytes);
  check(s.operand_offset_bytes == 0 || s.kind == SystemKind::cpu ||
            s.array.compute_model == ComputeModel::in_order_core,
        "{}: field 'operand_offset_bytes' is modelled by compute_model in_order_core only (the other models' "
        "closed forms place every operand on a line), and this system's is {}",
        origin, to_string(s.array.compute_model));
  check(s.qkv == QkvSchedule::fused || s.kind == SystemKind::cpu || s.array.compute_model == ComputeModel::in_order_core,
        "{}: field 'qkv': per_head is modelled by compute_model in_order_core only, and this system's is {}", origin,
        to_string(s.array.compute_model));
}

SystemDesc load_system(const std::string& path) {
  return system_from_json(read_json_file(path, "system description"), path);
}

json system_to_json(const SystemDesc& s) {
  json j{{"format", "bertlab-system"},
         {"version", 1},
         {"name", s.name},
         {"kind", to_string(s.kind)},
         {"cores", s.cores},
         {"clock_ghz", s.clock_ghz},
         {"elem_bytes", s.elem_bytes},
         {"pad_to_kernel", s.pad_to_kernel},
         {"rwma_block_rows", s.rwma_block_rows},
         {"core",
          {{"flops_per_cycle", s.core_flops_per_cycle},
           {"overlap", s.overlap},
           {"memory_parallelism", s.memory_parallelism},
           {"isa", to_string(s.core_isa)},
           {"issue_width", s.issue_width},
           {"walk", to_string(s.core_walk)}}},
         {"tlb",
          {{"entries", s.tlb.entries},
           {"ways", s.tlb.ways},
           {"page_bytes", s.tlb.page_bytes},
           {"walk_levels", s.tlb.walk_levels}}},
         {"l1", cache_to(s.l1)},
         {"llc", cache_to(s.llc)},
         {"llc_bus", {{"forward_cycles", s.llc_bus.forward_cycles}, {"response_cycles", s.llc_bus.response_cycles}}},
         {"dram",
          {{"channels", s.dram.channels},
           {"peak_gbps", s.dram.peak_gbps},
           {"burst_bytes", s.dram.burst_bytes},
           {"row_bytes", s.dram.row_bytes},
           {"banks", s.dram.banks},
           {"row_hit_ns", s.dram.row_hit_ns},
           {"row_miss_ns", s.dram.row_miss_ns}}}};
  if (s.kind == SystemKind::cpu) {
    j["gemm_peak_gflops"] = s.gemm_peak_gflops;
    j["precision"] = file_key(s.precision);
    j["cpu_model"] = to_string(s.cpu_model);
    j["resident_gbps"] = s.resident_gbps;
    j["parallel_region_us"] = s.parallel_region_seconds * 1e6;
    j["elementwise_gelem_per_s"] = elementwise_rates_json(s.elementwise_gelem_per_s);
  } else {
    j["operand_offset_bytes"] = s.operand_offset_bytes;
    j["qkv"] = to_string(s.qkv);
    j["array"] = {{"kernel", s.array.kernel},
                  {"dataflow", to_string(s.array.dataflow)},
                  {"compute_model", to_string(s.array.compute_model)},
                  {"bytes_per_issue", s.array.bytes_per_issue},
                  {"cycles_per_issue", s.array.cycles_per_issue},
                  {"output_cycles_per_issue", s.array.output_cycles_per_issue}};
    if (const auto& m = s.array.scalesim_memory)
      j["array"]["scalesim_memory"] = {{"ifmap_sram_kb", m->ifmap_sram_kb},
                                       {"filter_sram_kb", m->filter_sram_kb},
                                       {"ofmap_sram_kb", m->ofmap_sram_kb},
                                       {"bandwidth_words_per_cycle", m->bandwidth_words_per_cycle},
                                       {"stall_double_count", m->stall_double_count}};
  }
  return j;
}

}  // namespace bertlab::hw
