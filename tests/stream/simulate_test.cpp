// The simulator and the traces.
#include <gtest/gtest.h>

#include "cachegen/error.h"
#include "cachegen/planner_sim.h"
#include "planner_test_support.h"

namespace cachegen {
namespace {

TEST(BandwidthTrace, PerChunkValuesAndTheLastHolds) {
  const BandwidthTrace t{"t", {100, 10}, 0};
  EXPECT_DOUBLE_EQ(t.transfer_seconds(0, 5, 100), 1);
  EXPECT_DOUBLE_EQ(t.transfer_seconds(1, 0, 100), 10);
  EXPECT_DOUBLE_EQ(t.transfer_seconds(7, 0, 100), 10);
}

TEST(BandwidthTrace, OverTimeIntegratesAcrossSegments) {
  const BandwidthTrace t{"t", {100, 10, 1000}, 1.0};
  // From 0.5 s: 50 bytes in the rest of segment 0, 10 in segment 1, 40 at 1000 B/s.
  EXPECT_DOUBLE_EQ(t.transfer_seconds(0, 0.5, 100), 0.5 + 1 + 0.04);
  EXPECT_DOUBLE_EQ(t.transfer_seconds(0, 0.5, 30), 0.3);
  EXPECT_DOUBLE_EQ(t.transfer_seconds(0, 10, 500), 0.5);  // after the trace: the last value
}

TEST(BandwidthTrace, ScriptedTraces) {
  const auto c = constant_trace(5, 3);
  EXPECT_EQ(c.bytes_per_s, (std::vector<double>{5, 5, 5}));
  const auto s = step_trace(100, 10, 2, 4);
  EXPECT_EQ(s.bytes_per_s, (std::vector<double>{100, 100, 10, 10}));
  const auto a = uniform_random_trace(1, 3, 10000, 42);
  EXPECT_EQ(a.bytes_per_s, uniform_random_trace(1, 3, 10000, 42).bytes_per_s);
  EXPECT_NE(a.bytes_per_s, uniform_random_trace(1, 3, 10000, 43).bytes_per_s);
  double sum = 0;
  for (double v : a.bytes_per_s) {
    EXPECT_GE(v, 1);
    EXPECT_LE(v, 3);
    sum += v;
  }
  EXPECT_NEAR(sum / 10000, 2, 0.03);
  EXPECT_THROW(validate_trace({"e", {}, 0}), Error);
  EXPECT_THROW(validate_trace({"z", {1, 0}, 0}), Error);
  EXPECT_THROW(validate_trace({"s", {1}, -1}), Error);
}

TEST(Simulate, AccountsTimeBytesAndQuality) {
  // 3 chunks of 100 tokens, 2 elements per token; low = 1000 B = 40 bits/element.
  const auto chunks = test::three_level_chunks(3, 100, 4000, 2000, 1000);
  SimSettings sim;
  sim.deadline_s = 3;
  sim.cost = test::prefill_only(10);
  sim.elements_per_token = 2;
  const SimResult r = simulate(FixedLevelPolicy("low"), chunks, constant_trace(1000, 1), sim);
  EXPECT_TRUE(r.met_deadline);  // exactly 3 s
  EXPECT_DOUBLE_EQ(r.load_s, 3);
  EXPECT_EQ(r.bytes, 3000u);
  EXPECT_DOUBLE_EQ(r.bits_per_element, 40);
  EXPECT_DOUBLE_EQ(r.mean_kl, 0.1);
  EXPECT_EQ(r.levels, (std::vector<int>{2, 2, 2}));

  // Decode time counts; the deadline is then missed.
  sim.cost.decode_bytes_per_s = 1000;
  EXPECT_FALSE(
      simulate(FixedLevelPolicy("low"), chunks, constant_trace(1000, 1), sim).met_deadline);
}

// Recomputes from chunk 1 whatever the state.
class RecomputeFromSecond final : public PlannerPolicy {
 public:
  Decision decide(size_t i, const LoadState&) const override {
    return i == 0 ? Decision::load(0) : Decision::recompute_rest();
  }
  std::string name() const override { return "test"; }
};

TEST(Simulate, RecomputeSendsTokenIdsThenPrefills) {
  std::vector<ChunkOptions> chunks = test::three_level_chunks(3, 100, 4000, 2000, 1000);
  chunks[2].n_tokens = 50;
  SimSettings sim;
  sim.cost.prefill_tokens_per_s = 10;
  sim.cost.token_bytes = 4;
  // Chunk 0 lossless: 4 s at 1000 B/s. Then 150 tokens: 600 B of ids at 100 B/s + 15 s prefill.
  const SimResult r =
      simulate(RecomputeFromSecond(), chunks, BandwidthTrace{"", {1000, 100}, 0}, sim);
  EXPECT_DOUBLE_EQ(r.load_s, 4 + 6 + 15);
  EXPECT_EQ(r.bytes, 4600u);
  EXPECT_EQ(r.recompute_from, 1u);
  EXPECT_EQ(r.levels, (std::vector<int>{0, -1, -1}));
  EXPECT_EQ(r.mean_kl, 0.0);
}

TEST(Simulate, RejectsBadInputs) {
  const auto chunks = test::three_level_chunks(3, 100, 4000, 2000, 1000);
  SimSettings sim;
  EXPECT_THROW(simulate(FixedLevelPolicy("low"), {}, constant_trace(1, 1), sim), Error);
  EXPECT_THROW(simulate(FixedLevelPolicy("low"), chunks, {"e", {}, 0}, sim), Error);
  sim.cost.prefill_tokens_per_s = -1;
  EXPECT_THROW(simulate(FixedLevelPolicy("low"), chunks, constant_trace(1, 1), sim), Error);
}

TEST(Simulate, Summarize) {
  SimResult a, b;
  a.met_deadline = true;
  a.load_s = 1;
  a.mean_kl = 0.1;
  a.bits_per_element = 2;
  b.load_s = 3;
  b.mean_kl = 0.3;
  b.bits_per_element = 4;
  const std::vector<SimResult> rs{a, b};
  const SimSummary s = summarize(rs);
  EXPECT_EQ(s.n_loads, 2u);
  EXPECT_DOUBLE_EQ(s.deadline_met_fraction, 0.5);
  EXPECT_DOUBLE_EQ(s.mean_load_s, 2);
  EXPECT_DOUBLE_EQ(s.mean_kl, 0.2);
  EXPECT_DOUBLE_EQ(s.mean_bits_per_element, 3);
  EXPECT_EQ(summarize({}).n_loads, 0u);
}

}  // namespace
}  // namespace cachegen
