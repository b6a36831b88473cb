#include <gtest/gtest.h>

#include <cmath>

#include "cachegen/error.h"
#include "cachegen/planner.h"

namespace cachegen {
namespace {

TEST(ThroughputEstimator, InitialEstimateUntilTheFirstSample) {
  ThroughputEstimator est(5e6, 4);
  EXPECT_DOUBLE_EQ(est.estimate(), 5e6);
  est.observe(0, 1.0);    // no bytes: no rate
  est.observe(100, 0.0);  // no time: no rate
  EXPECT_EQ(est.n_observed(), 0u);
  EXPECT_DOUBLE_EQ(est.estimate(), 5e6);
}

TEST(ThroughputEstimator, HarmonicMeanIsTotalBytesOverTotalTime) {
  ThroughputEstimator est(1, 2);
  est.observe(100, 1.0);  // 100 B/s
  est.observe(100, 0.1);  // 1000 B/s
  // Arithmetic mean would be 550 B/s; the time-weighted (harmonic) one is 200 / 1.1.
  EXPECT_DOUBLE_EQ(est.estimate(), 200 / 1.1);
}

TEST(ThroughputEstimator, WindowStartsFullOfTheInitialEstimate) {
  ThroughputEstimator est(1000, 4);
  est.observe(100, 1.0);  // 100 B/s, and 3 slots of 100 B at 1000 B/s
  EXPECT_DOUBLE_EQ(est.estimate(), 400 / 1.3);
  EXPECT_EQ(est.samples(), 1u);
}

TEST(ThroughputEstimator, VariationShrinksTowardsThePrior) {
  ThroughputEstimator est(1000, 4, 16, 1.0);
  EXPECT_DOUBLE_EQ(est.variation(), 1.0);
  est.observe(100, 1.0);
  EXPECT_DOUBLE_EQ(est.variation(), 1.0);  // one chunk: no spread yet
  est.observe(100, 1.0);
  est.observe(100, 1.0);
  // Three equal chunks: sample cv 0 over 2 degrees of freedom, prior 1 over 2 pseudo-samples.
  EXPECT_DOUBLE_EQ(est.variation(), std::sqrt(0.5));
  ThroughputEstimator spread(1000, 4, 16, 0.0);
  spread.observe(100, 1.0);  // 0.01 s/B
  spread.observe(100, 3.0);  // 0.03 s/B: mean 0.02, sample sd 0.01414, cv 0.7071
  EXPECT_NEAR(spread.variation(), std::sqrt(0.5 / 3), 1e-12);
}

TEST(ThroughputEstimator, WindowForgetsOldChunks) {
  ThroughputEstimator est(1, 2);
  est.observe(1000, 1.0);
  est.observe(1000, 1.0);
  est.observe(1000, 10.0);  // a 10x drop: the first sample leaves the window
  EXPECT_DOUBLE_EQ(est.estimate(), 2000 / 11.0);
  est.observe(1000, 10.0);
  EXPECT_DOUBLE_EQ(est.estimate(), 100.0);
  EXPECT_EQ(est.n_observed(), 4u);
}

TEST(ThroughputEstimator, RejectsBadSettings) {
  EXPECT_THROW(ThroughputEstimator(0, 4), Error);
  EXPECT_THROW(ThroughputEstimator(-1, 4), Error);
  EXPECT_THROW(ThroughputEstimator(1e6, 0), Error);
  EXPECT_THROW(ThroughputEstimator(1e6, 4, 1), Error);
  EXPECT_THROW(ThroughputEstimator(1e6, 4, 16, -1), Error);
}

}  // namespace
}  // namespace cachegen
