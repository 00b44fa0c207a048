#pragma once
// Measures this machine: the sustained oneDNN matmul rate on a large square GEMM and on any
// (batched) GEMM shape, and the sustained memory bandwidth of OpenMP read, write and triad
// loops. All use the OpenMP thread count in force (set by the caller).
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "base/enum_table.h"
#include "ops/activation.h"

namespace bertlab::ops {

struct PeakResult {
  double gflops = 0;   // 90th percentile over repetitions
  int n = 0;           // matrix size used
};

// f32 (bf16 = false) or bf16 inputs with f32 accumulation; runs for about `seconds`.
PeakResult measure_matmul_peak(bool bf16, double seconds = 1.0, int n = 2048);

// One GEMM problem: `batch` independent products (m x k) * (k x n), B in the layout oneDNN
// prefers (prepacked, like the executor's weights), A and C plain.
struct GemmProblem {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool bf16 = false;
};
struct GemmRate {
  double gflops = 0;  // 90th percentile over repetitions
  int repetitions = 0;
};
// Runs the problem repeatedly for about `seconds` (at least 3 timed repetitions after one
// warm-up). bf16 needs a CPU with avx512_bf16 or AMX; see cpu_has_bf16().
GemmRate measure_matmul_rate(const GemmProblem& p, double seconds);

// True if bf16 matmuls run natively here: active_isa() is avx512_core_bf16 or higher (ops/isa.h;
// bf16_unavailable_reason() says why not).
bool cpu_has_bf16();
// The ISA oneDNN dispatches to on this CPU, e.g. "avx512_core_amx".
std::string dnnl_isa_name();

// Sustained bandwidth of an OpenMP loop over arrays of `array_bytes` bytes each (choose well
// above the last-level cache). Bytes counted as in STREAM: read = 1 array read (a sum),
// write = 1 array written (a fill), triad a = b + s*c = 2 read + 1 written; write-allocate
// traffic is not counted.
#define BERTLAB_BANDWIDTH_KERNELS(X) X(read, "read") X(write, "write") X(triad, "triad")
BERTLAB_ENUM(BandwidthKernel, uint8_t, BERTLAB_BANDWIDTH_KERNELS)
struct BandwidthResult {
  double gbs = 0;  // 90th percentile over repetitions, 1e9 bytes per second
  int repetitions = 0;
};
BandwidthResult measure_bandwidth(BandwidthKernel kernel, int64_t array_bytes, double seconds);

// The triad over data that stays in the cache: three arrays of `array_bytes` bytes (choose them
// to fit the cache, see cpu_cache_bytes), each thread working on its own static slice. Unlike
// measure_bandwidth, each thread repeats its slice back to back inside one parallel region and
// times itself by the CPU time it ran (CLOCK_THREAD_CPUTIME_ID), after warm-up passes that bring
// the slice into its cache: a thread that waits for a core (another program on a shared
// machine) or for the other threads does not count that wait. Short repetitions of a small
// array timed by the wall clock measure the scheduler more than the cache. Returns the sum over
// threads of each thread's 90th-percentile rate, 1e9 bytes per second, counted as the triad of
// measure_bandwidth (3 arrays).
double measure_resident_triad(int64_t array_bytes, double seconds);

// The size in bytes of this CPU's cache of `level` (1 data, 2, 3) as Linux describes cpu0's
// caches (/sys/devices/system/cpu/cpu0/cache), else sysconf; 0 when unknown. (In a virtual
// machine sysconf can report the host's cache; sysfs reports what the guest sees.)
int64_t cpu_cache_bytes(int level);

// Fixed cost of one OpenMP parallel region (fork, a static loop of one trivial iteration per
// thread, join) with the thread count in force: the median over batches of regions run for
// about `seconds`. Every executor node enters at least one (an OpenMP loop or a oneDNN
// primitive), so it is a floor under small nodes; on a machine shared with other processes
// it grows whenever a thread waits for a core, and the median keeps that typical share.
double measure_parallel_region_seconds(double seconds);

// The kinds of element-wise kernel below, with the suffix of their machine.json key after the
// activation's name (nullptr: a kernel of no activation, keyed by its kind's name).
#define BERTLAB_ELEMENTWISE_KINDS(X) \
  X(activation, "activation", "") X(activation_grad, "activation_grad", "_grad") X(dropout, "dropout", nullptr)
BERTLAB_ENUM(ElementwiseKind, uint8_t, BERTLAB_ELEMENTWISE_KINDS)

// Element-wise kernels of the executor whose cost is vector compute, not bytes: the forward
// and backward of every activation whose row is `rated` (ops/activation.h: the erf GELU, SiLU;
// ops::ActivationOp, ActivationGrad), named "<activation>" and "<activation>_grad", and the
// counter-based dropout (a hash per element, ops::dropout_forward; its backward is the same
// kernel). A memory roofline prices them at a fraction of their time. The list follows the
// activation table, so a rated row is calibrated and priced without further edits.
struct ElementwiseKernel {
  using Kind = ElementwiseKind;
  Kind kind = Kind::dropout;
  Activation act = Activation::none;  // kind activation or activation_grad
  constexpr bool operator==(const ElementwiseKernel&) const = default;
};
constexpr size_t rated_activation_count() {
  size_t n = 0;
  for (const auto& a : kActivations) n += a.rated ? 1 : 0;
  return n;
}
inline constexpr size_t kElementwiseKernelCount = 2 * rated_activation_count() + 1;
// The rated activations' forward and backward in table order, then the dropout.
constexpr std::array<ElementwiseKernel, kElementwiseKernelCount> elementwise_kernel_list() {
  std::array<ElementwiseKernel, kElementwiseKernelCount> k{};
  size_t i = 0;
  for (const auto& a : kActivations) {
    if (!a.rated) continue;
    k[i++] = {ElementwiseKernel::Kind::activation, a.act};
    k[i++] = {ElementwiseKernel::Kind::activation_grad, a.act};
  }
  k[i] = {ElementwiseKernel::Kind::dropout, Activation::none};
  return k;
}
inline constexpr auto kElementwiseKernels = elementwise_kernel_list();
// The kernel's place in kElementwiseKernels; none for a kernel not in the list (an activation
// whose row is not rated).
std::optional<size_t> elementwise_index(ElementwiseKernel k);
// "gelu", "gelu_grad", "dropout": the key of its rate in machine.json.
std::string to_string(ElementwiseKernel k);
// A rate per kernel, in the order of kElementwiseKernels; 0: not calibrated.
using ElementwiseRates = std::array<double, kElementwiseKernelCount>;
// The sustained rate of the kernel over `elements` f32 elements (its input, output and, for
// the backward, dy: separate buffers, as the executor's), in 1e9 elements per second, bytes
// included; the 90th percentile over repetitions for about `seconds`.
double measure_elementwise_rate(ElementwiseKernel k, int64_t elements, double seconds);

}  // namespace bertlab::ops
