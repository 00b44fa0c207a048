#include "ops/peak.h"

#include <omp.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ops/dnnl_context.h"
#include "ops/elementwise.h"
#include "ops/isa.h"

namespace bertlab::ops {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Repeats `once` (after one untimed call: JIT, page faults) for about `seconds`, at least 3
// times; returns the 90th percentile of work / time. Other processes on a shared machine only
// ever slow a repetition down, so a high percentile is closest to what the machine sustains
// while staying robust to a single odd repetition.
template <typename F>
std::pair<double, int> sustained_rate(F&& once, double work, double seconds) {
  once();
  std::vector<double> rates;
  auto start = clock_type::now();
  do {
    auto t0 = clock_type::now();
    once();
    rates.push_back(work / seconds_since(t0));
  } while (rates.size() < 3 || seconds_since(start) < seconds);
  std::sort(rates.begin(), rates.end());
  const size_t idx = static_cast<size_t>(0.9 * static_cast<double>(rates.size() - 1) + 0.5);
  return {rates[idx], static_cast<int>(rates.size())};
}

// Small finite values: no denormals, no NaNs, so timing does not depend on the data.
void fill_memory(dnnl::memory& m, bool bf16) {
  const size_t bytes = m.get_desc().get_size();
  void* p = m.get_data_handle();
  if (bf16) {
    auto* h = static_cast<uint16_t*>(p);
    std::fill(h, h + bytes / 2, uint16_t{0x3c00});  // bf16 0.0078125
  } else {
    auto* f = static_cast<float*>(p);
    std::fill(f, f + bytes / 4, 0.0078125f);
  }
}

}  // namespace

GemmRate measure_matmul_rate(const GemmProblem& p, double seconds) {
  using dnnl::memory;
  auto& ctx = dnnl_context();
  auto in_dt = p.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const bool batched = p.batch > 1;
  auto dims = [&](int64_t r, int64_t c) {
    return batched ? memory::dims{p.batch, r, c} : memory::dims{r, c};
  };
  auto plain = batched ? memory::format_tag::abc : memory::format_tag::ab;
  memory::desc a(dims(p.m, p.k), in_dt, plain);
  memory::desc b_any(dims(p.k, p.n), in_dt, memory::format_tag::any);
  memory::desc c(dims(p.m, p.n), memory::data_type::f32, plain);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b_any, c), ctx.engine);
  dnnl::matmul prim(pd);
  memory ma(a, ctx.engine), mb(pd.weights_desc(), ctx.engine), mc(c, ctx.engine);
  fill_memory(ma, p.bf16);
  fill_memory(mb, p.bf16);
  auto once = [&] {
    prim.execute(ctx.stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    ctx.stream.wait();
  };
  const double gflop = 2.0 * p.batch * p.m * double(p.n) * p.k / 1e9;
  auto [rate, reps] = sustained_rate(once, gflop, seconds);
  return {rate, reps};
}

PeakResult measure_matmul_peak(bool bf16, double seconds, int n) {
  auto r = measure_matmul_rate({1, n, n, n, bf16}, seconds);
  return {r.gflops, n};
}

bool cpu_has_bf16() { return active_isa() >= Isa::avx512_core_bf16; }

std::string dnnl_isa_name() {
  using isa = dnnl::cpu_isa;
  // oneDNN's own list of levels is open (a newer oneDNN adds some): a level not here is "unknown".
  static constexpr std::pair<isa, const char*> kNames[] = {
      {isa::sse41, "sse41"},
      {isa::avx, "avx"},
      {isa::avx2, "avx2"},
      {isa::avx2_vnni, "avx2_vnni"},
      {isa::avx512_mic, "avx512_mic"},
      {isa::avx512_mic_4ops, "avx512_mic_4ops"},
      {isa::avx512_core, "avx512_core"},
      {isa::avx512_core_vnni, "avx512_core_vnni"},
      {isa::avx512_core_bf16, "avx512_core_bf16"},
      {isa::avx512_core_amx, "avx512_core_amx"},
  };
  const isa effective = dnnl::get_effective_cpu_isa();
  for (const auto& [level, name] : kNames)
    if (level == effective) return name;
  return "unknown";
}

namespace {

// The three STREAM-like loops, as plain functions so the compiler sees restrict-free locals.
double read_kernel(const double* x, int64_t n) {
  double sum = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  return sum;
}
void write_kernel(double* y, int64_t n, double v) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = v;
}
void triad_kernel(double* a, const double* b, const double* c, int64_t n, double s) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

}  // namespace

BandwidthResult measure_bandwidth(BandwidthKernel kernel, int64_t array_bytes, double seconds) {
  const int64_t n = std::max<int64_t>(array_bytes / int64_t(sizeof(double)), 1024);
  const int arrays = kernel == BandwidthKernel::triad ? 3 : 1;
  std::vector<std::unique_ptr<double[]>> buf;
  for (int i = 0; i < arrays; ++i) {
    buf.emplace_back(new double[n]);
    // First touch in parallel with the kernels' static schedule: each thread's pages are local.
    write_kernel(buf.back().get(), n, 0.5 + i);
  }
  double sink = 0;
  std::function<void()> once;
  double bytes = 8.0 * n;
  switch (kernel) {
    case BandwidthKernel::read:
      once = [&] { sink += read_kernel(buf[0].get(), n); };
      break;
    case BandwidthKernel::write:
      once = [&] { write_kernel(buf[0].get(), n, sink); };
      break;
    case BandwidthKernel::triad:
      bytes = 24.0 * n;
      once = [&] { triad_kernel(buf[0].get(), buf[1].get(), buf[2].get(), n, 3.0); };
      break;
  }
  auto [rate, reps] = sustained_rate(once, bytes / 1e9, seconds);
  return {rate, reps};
}

namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One thread's part of measure_resident_triad: its slice [lo, hi) of a = b + s*c, repeated.
double slice_triad_rate(double* a, const double* b, const double* c, int64_t lo, int64_t hi, double seconds) {
  auto pass = [&] {
    for (int64_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0 * c[i];
    asm volatile("" ::: "memory");  // every pass happens: none is merged with the next
  };
  for (int i = 0; i < 3; ++i) pass();  // warm-up: the slice comes into this core's cache
  const double bytes = 24.0 * static_cast<double>(hi - lo);
  if (bytes == 0) return 0;
  // Passes per sample: enough for about half a millisecond of running, so the clock's cost is
  // negligible.
  int64_t passes = 1;
  for (;;) {
    const double t0 = thread_cpu_seconds();
    for (int64_t k = 0; k < passes; ++k) pass();
    if (thread_cpu_seconds() - t0 >= 5e-4 || passes >= (int64_t{1} << 20)) break;
    passes *= 2;
  }
  std::vector<double> rates;
  const double start = thread_cpu_seconds();
  do {
    const double t0 = thread_cpu_seconds();
    for (int64_t k = 0; k < passes; ++k) pass();
    const double dt = thread_cpu_seconds() - t0;
    if (dt > 0) rates.push_back(bytes * static_cast<double>(passes) / dt);
  } while (rates.size() < 5 || thread_cpu_seconds() - start < seconds);
  std::sort(rates.begin(), rates.end());
  return rates[static_cast<size_t>(0.9 * static_cast<double>(rates.size() - 1) + 0.5)];
}

}  // namespace

double measure_resident_triad(int64_t array_bytes, double seconds) {
  const int64_t n = std::max<int64_t>(array_bytes / int64_t(sizeof(double)), 1024);
  std::vector<std::unique_ptr<double[]>> buf;
  for (int i = 0; i < 3; ++i) {
    buf.emplace_back(new double[n]);
    write_kernel(buf.back().get(), n, 0.5 + i);  // first touch by the thread that will use it
  }
  std::vector<double> rate(static_cast<size_t>(omp_get_max_threads()), 0.0);
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;  // the static schedule's slice, as write_kernel's
    rate[static_cast<size_t>(t)] = slice_triad_rate(buf[0].get(), buf[1].get(), buf[2].get(), lo, hi, seconds);
  }
  double sum = 0;
  for (double r : rate) sum += r;
  return sum / 1e9;
}

int64_t cpu_cache_bytes(int level) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/devices/system/cpu/cpu0/cache", ec)) {
    if (e.path().filename().string().rfind("index", 0) != 0) continue;
    std::ifstream lv(e.path() / "level"), ty(e.path() / "type"), sz(e.path() / "size");
    int l = 0;
    std::string type, size;
    if (!(lv >> l) || !(ty >> type) || !(sz >> size) || l != level || type == "Instruction") continue;
    // "1024K", "32M"
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(size, &used);
    } catch (const std::exception&) {
      continue;
    }
    const char unit = used < size.size() ? size[used] : 'B';
    const int64_t mult = unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : unit == 'G' ? int64_t{1} << 30 : 1;
    if (v > 0) return v * mult;
  }
  const int name = level == 1 ? _SC_LEVEL1_DCACHE_SIZE : level == 2 ? _SC_LEVEL2_CACHE_SIZE : _SC_LEVEL3_CACHE_SIZE;
  const long v = sysconf(name);
  return v > 0 ? v : 0;
}

std::optional<size_t> elementwise_index(ElementwiseKernel k) {
  for (size_t i = 0; i < kElementwiseKernels.size(); ++i)
    if (kElementwiseKernels[i] == k) return i;
  return std::nullopt;
}

std::string to_string(ElementwiseKernel k) {
#define BERTLAB_ELEMENTWISE_KEY_SUFFIX(id, name, suffix) suffix,
  static constexpr std::array<const char*, enum_count<ElementwiseKind>> kSuffixes{
      BERTLAB_ELEMENTWISE_KINDS(BERTLAB_ELEMENTWISE_KEY_SUFFIX)};
#undef BERTLAB_ELEMENTWISE_KEY_SUFFIX
  const char* suffix = kSuffixes.at(static_cast<size_t>(k.kind));
  return suffix ? std::string(to_string(k.act)) + suffix : std::string(to_string(k.kind));
}

double measure_elementwise_rate(ElementwiseKernel k, int64_t elements, double seconds) {
  const int64_t n = std::max<int64_t>(elements, 1024);
  // Values in GELU's curved range, no denormals: the timing does not depend on the data.
  std::vector<float> x(static_cast<size_t>(n)), dy(static_cast<size_t>(n), 0.5f), y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 1000) / 250.f - 2.f;
  std::function<void()> once;
  std::unique_ptr<ActivationOp> fwd;
  std::unique_ptr<ActivationGrad> bwd;
  switch (k.kind) {
    case ElementwiseKernel::Kind::activation:
      fwd = std::make_unique<ActivationOp>(n, k.act);
      once = [&] { fwd->forward(y.data(), x.data()); };
      break;
    case ElementwiseKernel::Kind::activation_grad:
      bwd = std::make_unique<ActivationGrad>(n, k.act);
      once = [&] { bwd->forward(y.data(), dy.data(), x.data()); };
      break;
    case ElementwiseKernel::Kind::dropout: {
      uint64_t step = 0;
      once = [&] { dropout_forward(y.data(), x.data(), n, 0.1f, 1, {7, ++step, 0}); };
      break;
    }
  }
  return sustained_rate(once, static_cast<double>(n) / 1e9, seconds).first;
}

double measure_parallel_region_seconds(double seconds) {
  const int threads = omp_get_max_threads();
  std::vector<double> sink(static_cast<size_t>(threads) * 8, 0.0);  // a cache line per thread
  auto region = [&] {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < threads; ++t) sink[static_cast<size_t>(t) * 8] += 1.0;
  };
  constexpr int kBatch = 100;
  region();
  std::vector<double> per_region;
  const auto start = clock_type::now();
  do {
    const auto t0 = clock_type::now();
    for (int i = 0; i < kBatch; ++i) region();
    per_region.push_back(seconds_since(t0) / kBatch);
  } while (per_region.size() < 5 || seconds_since(start) < seconds);
  std::sort(per_region.begin(), per_region.end());
  return per_region[per_region.size() / 2];
}

}  // namespace bertlab::ops
