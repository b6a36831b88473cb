// Policies against each other on the scripted traces: a sudden drop and the paper's uniform
// random bandwidth. Prints one row per policy, trace set and deadline (the rows of
// `cachegen bench stream`). Context: 32 chunks x 256 tokens of a 7B-class model (8192 tokens;
// per chunk lossless 27.5 MB, high 9.4 MB, medium 3.0 MB, low 2.6 MB), prefill 5000 tokens/s
// (recomputing everything: 1.64 s), estimator starting at 1 Gbps.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cachegen/planner.h"
#include "cachegen/planner_sim.h"
#include "planner_test_support.h"

namespace cachegen {
namespace {

using test::kGbps;

SimSettings paper_settings(double deadline_s) {
  SimSettings sim;
  sim.deadline_s = deadline_s;
  sim.cost.prefill_tokens_per_s = 5000;
  sim.initial_throughput_bytes_per_s = 1 * kGbps;
  sim.elements_per_token = test::kElementsPerToken7B;
  return sim;
}

SimSummary run(const PlannerPolicy& policy, const std::vector<ChunkOptions>& chunks,
               const std::vector<BandwidthTrace>& traces, const SimSettings& sim,
               const char* trace_set, bool print = true) {
  std::vector<SimResult> results;
  for (const BandwidthTrace& t : traces) results.push_back(simulate(policy, chunks, t, sim));
  const SimSummary s = summarize(results);
  if (print) {
    std::printf(
        "%-18s %-14s deadline %4.2f s  met %5.1f%%  load %5.3f s  %6.3f bits/elem  KL %.5f\n",
        policy.name().c_str(), trace_set, sim.deadline_s, 100 * s.deadline_met_fraction,
        s.mean_load_s, s.mean_bits_per_element, s.mean_kl);
  }
  return s;
}

// Algorithm 1 planning for a fraction of the real deadline: the baseline given a safety margin.
class TightenedDeadline final : public PlannerPolicy {
 public:
  TightenedDeadline(const PlannerPolicy& inner, double fraction)
      : inner_(inner), fraction_(fraction) {}
  Decision decide(size_t i, const LoadState& state) const override {
    LoadState s = state;
    s.deadline_s *= fraction_;
    return inner_.decide(i, s);
  }
  std::string name() const override {
    char f[16];
    std::snprintf(f, sizeof f, " x%.2f", fraction_);
    return inner_.name() + f;
  }

 private:
  const PlannerPolicy& inner_;
  double fraction_;
};

TEST(TraceComparison, TenfoldDropMidLoad) {
  // 10 Gbps for 8 chunks, then 1 Gbps. Fixed high takes 0.24 s at 10 Gbps but 1.86 s here.
  const auto chunks = test::paper_chunks();
  const std::vector<BandwidthTrace> drop{step_trace(10 * kGbps, 1 * kGbps, 8, chunks.size())};
  const std::vector<BandwidthTrace> steady{constant_trace(10 * kGbps, chunks.size())};
  const SimSettings sim = paper_settings(1.0);
  FixedLevelPolicy high("high");
  DeadlinePlannerPolicy ours;
  CacheGenAlgorithm1Policy alg1;
  EXPECT_EQ(run(high, chunks, steady, sim, "constant").deadline_met_fraction, 1.0);
  EXPECT_EQ(run(high, chunks, drop, sim, "drop 10x @8").deadline_met_fraction, 0.0);
  run(alg1, chunks, drop, sim, "drop 10x @8");
  const SimResult r = simulate(ours, chunks, drop[0], sim);
  run(ours, chunks, drop, sim, "drop 10x @8");
  EXPECT_TRUE(r.met_deadline) << r.load_s;
  EXPECT_LT(r.mean_kl, 0.039);  // better than medium everywhere

  // The same drop over time (at 0.1 s), and a drop to 0.1 Gbps where recomputing must take over.
  const BandwidthTrace timed{"drop 10x @0.1s", {10 * kGbps, 1 * kGbps}, 0.1};
  EXPECT_TRUE(simulate(ours, chunks, timed, sim).met_deadline);
  EXPECT_FALSE(simulate(high, chunks, timed, sim).met_deadline);
  const SimSettings loose = paper_settings(2.0);
  const BandwidthTrace deep = step_trace(10 * kGbps, 0.1 * kGbps, 8, chunks.size());
  const SimResult d = simulate(ours, chunks, deep, loose);
  EXPECT_TRUE(d.met_deadline) << d.load_s;
  EXPECT_LT(d.recompute_from, chunks.size());
}

TEST(TraceComparison, UniformRandomPaperTraces) {
  const auto chunks = test::paper_chunks();
  std::vector<BandwidthTrace> traces;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    traces.push_back(paper_uniform_trace(test::kElementsPerToken7B, chunks.size(), seed));
  }
  const CacheGenAlgorithm1Policy alg1;
  const DeadlinePlannerPolicy ours;
  for (double deadline : {0.5, 0.75, 1.0, 1.25, 1.5, 2.0}) {
    const SimSettings sim = paper_settings(deadline);
    for (const char* fixed : {"fixed:high", "fixed:medium", "fixed:low"}) {
      run(*make_planner_policy(fixed), chunks, traces, sim, "uniform");
    }
    const SimSummary a = run(alg1, chunks, traces, sim, "uniform");
    const SimSummary o = run(ours, chunks, traces, sim, "uniform");
    EXPECT_GE(o.deadline_met_fraction, a.deadline_met_fraction) << deadline;
    if (deadline >= 1.0) {
      EXPECT_GE(o.deadline_met_fraction, 0.95) << deadline;
    }
    if (a.deadline_met_fraction >= o.deadline_met_fraction) {
      // Both meet (almost) every deadline: ours is within 10% of Algorithm 1's KL (measured:
      // 0.00519 vs 0.00485 at 1.5 s, equal at 2 s).
      EXPECT_LE(o.mean_kl, 1.1 * a.mean_kl) << deadline;
      continue;
    }
    // Algorithm 1 meets less often because it spends all the time it predicts it has. Given the
    // safety margin it needs to meet the deadline as often as ours (planning for a fraction of
    // it), its KL is worse.
    bool matched = false;
    for (double fraction = 0.95; fraction > 0.02 && !matched; fraction -= 0.05) {
      const TightenedDeadline tight(alg1, fraction);
      const SimSummary t = run(tight, chunks, traces, sim, "uniform", false);
      if (t.deadline_met_fraction < o.deadline_met_fraction) continue;
      run(tight, chunks, traces, sim, "uniform");
      EXPECT_LT(o.mean_kl, t.mean_kl) << deadline;
      matched = true;
    }
  }
}

TEST(TraceComparison, ScaledTracesTimeAModelLikeThePaper) {
  // stories260K (320 KV elements per token) on the scaled trace times like the 7B model.
  const auto big = test::paper_chunks(8);
  const auto small = uniform_chunks(8, 256, 320, measured_quality_levels());
  SimSettings sim = paper_settings(1.0);
  SimSettings small_sim = sim;
  small_sim.initial_throughput_bytes_per_s *= 320 / test::kElementsPerToken7B;
  small_sim.cost.token_bytes = 0;
  sim.cost.token_bytes = 0;
  const FixedLevelPolicy medium("medium");
  const SimResult a =
      simulate(medium, big, paper_uniform_trace(test::kElementsPerToken7B, 8, 7), sim);
  const SimResult b = simulate(medium, small, paper_uniform_trace(320, 8, 7), small_sim);
  EXPECT_NEAR(a.load_s, b.load_s, 1e-3 * a.load_s);
}

}  // namespace
}  // namespace cachegen
