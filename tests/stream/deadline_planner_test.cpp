// DeadlinePlannerPolicy: hand-computed plans, and against the baselines on scripted traces.
#include <gtest/gtest.h>

#include <cstdio>
#include <limits>

#include "cachegen/error.h"
#include "cachegen/planner.h"
#include "cachegen/planner_sim.h"
#include "planner_test_support.h"

namespace cachegen {
namespace {

using test::kHigh;
using test::kLossless;
using test::kLow;
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(DeadlinePlanner, MixesLevelsWhereAlgorithm1UsesOne) {
  // 2 chunks; at 1000 B/s lossless 4 s, high 2 s, low 1 s; no useful recompute. 6 s: Algorithm 1
  // must use one level for both (high, 4 s); the plan fits high + lossless (6 s), the upgrade
  // going to the later chunk.
  const auto chunks = test::three_level_chunks(2, 100, 4000, 2000, 1000);
  const LoadState state{0, 6, 1000, chunks, test::prefill_only(1)};
  EXPECT_EQ(DeadlinePlannerPolicy(0).decide(0, state), Decision::load(kHigh));
  EXPECT_EQ(CacheGenAlgorithm1Policy().decide(0, state), Decision::load(kHigh));
  // At chunk 1 with 4 s left: lossless; with a 50% margin on transfers lossless takes 6 s: high.
  const LoadState second{2, 6, 1000, chunks, test::prefill_only(1)};
  EXPECT_EQ(DeadlinePlannerPolicy(0).decide(1, second), Decision::load(kLossless));
  EXPECT_EQ(DeadlinePlannerPolicy(0.5).decide(1, second), Decision::load(kHigh));
  // A chunk-to-chunk variation of 0.5 with risk_z 1: lossless needs 4 + 2 s: high.
  LoadState noisy = second;
  noisy.throughput_cv = 0.5;
  EXPECT_EQ(DeadlinePlannerPolicy(0, 1).decide(1, noisy), Decision::load(kHigh));
  EXPECT_EQ(DeadlinePlannerPolicy(0, 0).decide(1, noisy), Decision::load(kLossless));

  SimSettings sim;
  sim.deadline_s = 6;
  sim.cost = test::prefill_only(1);
  sim.initial_throughput_bytes_per_s = 1000;
  sim.estimator_prior_cv = 0;  // the trace is constant, and so is the estimate
  const auto trace = constant_trace(1000, 2);
  const SimResult ours = simulate(DeadlinePlannerPolicy(0), chunks, trace, sim);
  const SimResult alg1 = simulate(CacheGenAlgorithm1Policy(), chunks, trace, sim);
  EXPECT_TRUE(ours.met_deadline);
  EXPECT_TRUE(alg1.met_deadline);
  // On a constant trace Algorithm 1 reaches the same plan by replanning at the last chunk.
  EXPECT_EQ(ours.levels, (std::vector<int>{kHigh, kLossless}));
  EXPECT_EQ(alg1.levels, (std::vector<int>{kHigh, kLossless}));
  EXPECT_DOUBLE_EQ(ours.mean_kl, 0.005);
}

TEST(DeadlinePlanner, PlansARecomputeSuffix) {
  // 4 chunks: lossless 8 s, high 3 s, low 1 s each; recompute 2 s per chunk (50 tokens/s).
  // 7 s: r=1 (low, then recompute 3 chunks: 1 + 6 s) has loss 10 token-nats, the best plan.
  const auto chunks = test::three_level_chunks(4, 100, 8000, 3000, 1000);
  const LoadState state{0, 7, 1000, chunks, test::prefill_only(50)};
  const DeadlinePlannerPolicy policy(0);
  EXPECT_EQ(policy.decide(0, state), Decision::load(kLow));
  LoadState next = state;
  next.elapsed_s = 1;
  EXPECT_EQ(policy.decide(1, next), Decision::recompute_rest());
  // 8 s: recompute everything.
  next = state;
  next.deadline_s = 8;
  EXPECT_EQ(policy.decide(0, next), Decision::recompute_rest());
}

TEST(DeadlinePlanner, InfiniteDeadlineIsLosslessEverywhere) {
  const auto chunks = test::paper_chunks();
  SimSettings sim;  // deadline infinite, prefill 5000 tokens/s
  for (double gbps : {0.1, 1.0, 10.0}) {
    sim.initial_throughput_bytes_per_s = gbps * test::kGbps;
    const SimResult r =
        simulate(DeadlinePlannerPolicy(), chunks, constant_trace(gbps * test::kGbps, 1), sim);
    EXPECT_TRUE(r.met_deadline);
    EXPECT_EQ(r.mean_kl, 0.0);
    // Exact either way; it takes the faster: lossless at 10 Gbps (0.7 s < 1.6 s of prefill),
    // recompute at 0.1 Gbps.
    if (gbps == 10.0) {
      EXPECT_EQ(r.levels, std::vector<int>(chunks.size(), kLossless));
    }
    if (gbps == 0.1) {
      EXPECT_EQ(r.recompute_from, 0u);
    }
  }
  sim.cost.prefill_tokens_per_s = 1;  // recomputing is hopeless: lossless at any bandwidth
  sim.initial_throughput_bytes_per_s = 0.1 * test::kGbps;
  const SimResult r =
      simulate(DeadlinePlannerPolicy(), chunks, constant_trace(0.1 * test::kGbps, 1), sim);
  EXPECT_EQ(r.levels, std::vector<int>(chunks.size(), kLossless));
}

TEST(DeadlinePlanner, ImpossibleDeadlineTakesTheFastestOptionAndMisses) {
  const auto chunks = test::paper_chunks();
  const size_t low = 3;
  SimSettings sim;
  sim.deadline_s = 1e-3;
  sim.initial_throughput_bytes_per_s = 10 * test::kGbps;
  // Loading low (32 x 2.6 MB at 10 Gbps: 67 ms) beats recomputing (8192 tokens: 1.6 s).
  SimResult r = simulate(DeadlinePlannerPolicy(), chunks, constant_trace(10 * test::kGbps, 1), sim);
  EXPECT_FALSE(r.met_deadline);
  EXPECT_EQ(r.levels, std::vector<int>(chunks.size(), low));
  EXPECT_EQ(r.recompute_from, chunks.size());
  // At 0.01 Gbps recomputing is faster.
  sim.initial_throughput_bytes_per_s = 0.01 * test::kGbps;
  r = simulate(DeadlinePlannerPolicy(), chunks, constant_trace(0.01 * test::kGbps, 1), sim);
  EXPECT_FALSE(r.met_deadline);
  EXPECT_EQ(r.recompute_from, 0u);
  EXPECT_EQ(r.mean_kl, 0.0);
}

TEST(DeadlinePlanner, RejectsABadMargin) {
  EXPECT_THROW(DeadlinePlannerPolicy(-0.1), Error);
  EXPECT_THROW(DeadlinePlannerPolicy{kInf}, Error);
}

TEST(SlackPlanner, RecomputesOnceTheFallbackFitsAndLoadsUntilThen) {
  // The PlansARecomputeSuffix case, deterministic (cv 0): the slack to recomputing everything is
  // 7 - 8 = -1 s; low (1 s, recompute of that chunk 2 s) closes it; then recompute.
  const auto chunks = test::three_level_chunks(4, 100, 8000, 3000, 1000);
  const LoadState state{0, 7, 1000, chunks, test::prefill_only(50)};
  const SlackPlannerPolicy policy;
  EXPECT_EQ(policy.decide(0, state), Decision::load(kLow));
  LoadState next = state;
  next.elapsed_s = 1;
  EXPECT_EQ(policy.decide(1, next), Decision::recompute_rest());
  next = state;
  next.deadline_s = 8;
  EXPECT_EQ(policy.decide(0, next), Decision::recompute_rest());
  // 9 s: recomputing everything fits with a second to spare (KL 0).
  next.deadline_s = 9;
  EXPECT_EQ(policy.decide(0, next), Decision::recompute_rest());
}

TEST(SlackPlanner, NoDeadlineAndImpossibleDeadline) {
  const auto chunks = test::paper_chunks();
  SimSettings sim;  // no deadline: lossless where it is faster than prefill, else recompute
  sim.initial_throughput_bytes_per_s = 10 * test::kGbps;
  SimResult r = simulate(SlackPlannerPolicy(), chunks, constant_trace(10 * test::kGbps, 1), sim);
  EXPECT_EQ(r.levels, std::vector<int>(chunks.size(), kLossless));
  sim.initial_throughput_bytes_per_s = 0.1 * test::kGbps;
  r = simulate(SlackPlannerPolicy(), chunks, constant_trace(0.1 * test::kGbps, 1), sim);
  EXPECT_EQ(r.recompute_from, 0u);
  // 1 ms: nothing meets it (the choice among hopeless options is left to the grid's rounding).
  sim.deadline_s = 1e-3;
  sim.initial_throughput_bytes_per_s = 10 * test::kGbps;
  r = simulate(SlackPlannerPolicy(), chunks, constant_trace(10 * test::kGbps, 1), sim);
  EXPECT_FALSE(r.met_deadline);
  EXPECT_THROW(SlackPlannerPolicy(0), Error);
  EXPECT_THROW(SlackPlannerPolicy(1, -0.1), Error);
}

}  // namespace
}  // namespace cachegen
