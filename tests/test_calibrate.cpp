// bertlab calibrate's conclusions (runtime/machine.h review_calibration) on given measurements:
// the peak is the square GEMM's, faster shapes are flagged with the reason, and a cache-resident
// triad below the DRAM triad is explained and left out. No timing: the measurements are made up.
#include <catch2/catch.hpp>

#include "runtime/machine.h"

using namespace bertlab;

namespace {

GemmCalibration gemm(const char* name, Precision p, int64_t batch, int64_t m, int64_t n, int64_t k, double gflops) {
  return {name, p, batch, m, n, k, gflops};
}

// The loaded machine: the square GEMM at 82.6, an attention shape at 130.3.
MachineInfo loaded_machine() {
  MachineInfo m;
  m.gemms = {gemm("square", Precision::fp32, 1, 2048, 2048, 2048, 82.6),
             gemm("attention.qkv", Precision::fp32, 1, 1024, 2304, 768, 85.0),  // 1.03x: not an outlier
             gemm("attention.scores", Precision::fp32, 96, 128, 128, 64, 130.3),
             gemm("ffn.intermediate", Precision::fp32, 1, 1024, 3072, 768, 95.0),  // 1.15x
             gemm("pooler.dense", Precision::fp32, 1, 8, 768, 768, 40.0)};
  m.bandwidth_triad = 17.5;
  m.bandwidth_triad_resident = 1.6;
  return m;
}

}  // namespace

TEST_CASE("calibrate: the peak is the square GEMM's and faster shapes are outliers with a reason", "[calibrate]") {
  const MachineInfo m = loaded_machine();
  const CalibrationReview r = review_calibration(m, int64_t{1} << 20);
  CHECK(r.gemm_peak_f32 == 82.6);  // not 130.3, the fastest shape
  CHECK_FALSE(r.gemm_peak_bf16.has_value());
  REQUIRE(r.outliers.size() == 2);
  CHECK(m.gemms[r.outliers[0].index].name == "attention.scores");
  CHECK(r.outliers[0].times_square == Approx(130.3 / 82.6));
  CHECK(m.gemms[r.outliers[1].index].name == "ffn.intermediate");
  // The reason in plain words: the square's rate, the likely cause, what to do, and not the peak.
  const std::string& why = r.outliers[0].reason;
  CHECK_THAT(why, Catch::Contains("faster than the large square GEMM (82.6 GFLOP/s)") &&
                      Catch::Contains("another program used the cores") && Catch::Contains("--passes 3") &&
                      Catch::Contains("not used as the peak"));
  // Each of the 96 products: Q (128 x 64) and K^T (64 x 128) in f32, 128 x 128 scores: 128 KB, in a 1 MB L2.
  CHECK_THAT(why, Catch::Contains("each of its 96 products works on 128 KB") && Catch::Contains("1024 KB L2"));
  // The FFN's operands do not fit: the other explanation.
  CHECK_THAT(r.outliers[1].reason, Catch::Contains("runs this shape better") && !Catch::Contains("L2"));
  // Without a known L2 size, no cache explanation.
  CHECK_THAT(review_calibration(m, 0).outliers[0].reason, !Catch::Contains("L2"));
}

TEST_CASE("calibrate: each precision's shapes are compared with its own square GEMM", "[calibrate]") {
  MachineInfo m;
  m.gemms = {gemm("square", Precision::fp32, 1, 2048, 2048, 2048, 300),
             gemm("attention.output", Precision::fp32, 1, 1024, 768, 768, 320),  // 1.07x
             gemm("square", Precision::bf16, 1, 2048, 2048, 2048, 1600),
             gemm("attention.output", Precision::bf16, 1, 1024, 768, 768, 2180)};  // 1.36x
  m.bandwidth_triad = 27;
  m.bandwidth_triad_resident = 56;
  const CalibrationReview r = review_calibration(m, 0);
  CHECK(r.gemm_peak_f32 == 300);
  REQUIRE(r.gemm_peak_bf16.has_value());
  CHECK(*r.gemm_peak_bf16 == 1600);
  REQUIRE(r.outliers.size() == 1);
  CHECK(r.outliers[0].index == 3);
  CHECK_FALSE(r.resident_below_dram);
  CHECK(r.resident_note.empty());
}

TEST_CASE("calibrate: without an f32 square GEMM there is no peak, and the error says so", "[calibrate]") {
  MachineInfo m;
  m.gemms = {gemm("attention.qkv", Precision::fp32, 1, 1024, 2304, 768, 85.0)};
  CHECK_THROWS_WITH(review_calibration(m, 0), Catch::Contains("no f32 'square' GEMM"));
}

TEST_CASE("calibrate: a cache-resident triad below the DRAM triad is explained and left out", "[calibrate]") {
  const CalibrationReview r = review_calibration(loaded_machine(), 0);
  CHECK(r.resident_below_dram);
  CHECK_THAT(r.resident_note, Catch::Contains("(1.6 GB/s) came out below the DRAM triad (17.5 GB/s)") &&
                                  Catch::Contains("cannot be slower") && Catch::Contains("leaves it out"));
  // Equal is possible (a cache no faster than memory): not flagged.
  MachineInfo equal = loaded_machine();
  equal.bandwidth_triad_resident = 17.5;
  CHECK_FALSE(review_calibration(equal, 0).resident_below_dram);
  // An older file without the resident triad: nothing to flag.
  MachineInfo older = loaded_machine();
  older.bandwidth_triad_resident.reset();
  CHECK_FALSE(review_calibration(older, 0).resident_below_dram);
}

TEST_CASE("calibrate: the resident triad's arrays fill at most half the last-level cache", "[calibrate]") {
  const int64_t kb = 1024, mb = kb * kb;
  CHECK(default_resident_array_bytes(32 * mb) == 4 * mb);  // capped at a BERT-base activation
  CHECK(default_resident_array_bytes(6 * mb) == 1 * mb);   // 3 arrays = 3 MB, half of 6
  CHECK(default_resident_array_bytes(128 * kb) == 64 * kb);  // never below 64 KB
  CHECK(default_resident_array_bytes(0) == 4 * mb);         // unknown cache
}

TEST_CASE("calibrate_machine applies the review: the square's rate is the peak", "[calibrate]") {
  CalibrateOptions o;
  o.seconds = 0.001;
  o.square_n = 64;
  o.batch = 1;
  o.seq = 8;
  o.bandwidth_array_bytes = 1 << 20;
  CalibrationReview r;
  const MachineInfo m = calibrate_machine(o, &r);
  REQUIRE(m.gemms.at(0).name == "square");
  CHECK(m.gemm_peak_f32 == m.gemms[0].gflops);
  CHECK(r.gemm_peak_f32 == m.gemm_peak_f32);
  for (const auto& x : r.outliers) CHECK(m.gemms.at(x.index).gflops > kGemmOutlierFactor * m.gemm_peak(m.gemms[x.index].precision));
  // Whatever the timings, machine.json never holds a resident triad below the DRAM triad.
  if (m.bandwidth_triad_resident) CHECK(*m.bandwidth_triad_resident >= m.bandwidth_triad);
  CHECK(r.resident_below_dram == !m.bandwidth_triad_resident.has_value());
}
