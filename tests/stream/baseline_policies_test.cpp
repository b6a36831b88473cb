// FixedLevelPolicy and CacheGen's Algorithm 1 on hand-computed cases.
#include <gtest/gtest.h>

#include "cachegen/error.h"
#include "cachegen/planner.h"
#include "planner_test_support.h"

namespace cachegen {
namespace {

using test::kHigh;
using test::kLossless;
using test::kLow;

// 3 chunks of 100 tokens; at 1000 B/s a chunk takes 4 s lossless, 2 s high, 1 s low.
// Prefill at 10 tokens/s: recomputing the whole context takes 30 s.
class Algorithm1 : public ::testing::Test {
 protected:
  std::vector<ChunkOptions> chunks = test::three_level_chunks(3, 100, 4000, 2000, 1000);
  CacheGenAlgorithm1Policy policy;
  LoadState state(double elapsed_s, double deadline_s, double prefill_tokens_per_s = 10) const {
    return {elapsed_s, deadline_s, 1000, chunks, test::prefill_only(prefill_tokens_per_s)};
  }
};

TEST_F(Algorithm1, BestLevelWhoseRemainingBytesFit) {
  // 10 s left: lossless 12 s no, high 6 s yes.
  EXPECT_EQ(policy.decide(0, state(0, 10)), Decision::load(kHigh));
  // Exactly 12 s left: lossless fits (<=).
  EXPECT_EQ(policy.decide(0, state(0, 12)), Decision::load(kLossless));
  // Last chunk, 2 s left: recompute 10 s no, lossless 4 s no, high 2 s yes.
  EXPECT_EQ(policy.decide(2, state(8, 10)), Decision::load(kHigh));
  // Second chunk, 1.9 s left for two chunks: nothing fits; low (2 s) is the fastest.
  EXPECT_EQ(policy.decide(1, state(8.1, 10)), Decision::load(kLow));
}

TEST_F(Algorithm1, RecomputesWhenTheRestFits) {
  // Prefill 100 tokens/s: the whole context recomputes in 3 s.
  EXPECT_EQ(policy.decide(0, state(0, 3, 100)), Decision::recompute_rest());
  // Prefill 50 tokens/s: 6 s. Just short of it, the best level that fits is low (3 s).
  EXPECT_EQ(policy.decide(0, state(0, 6, 50)), Decision::recompute_rest());
  EXPECT_EQ(policy.decide(0, state(0, 5.99, 50)), Decision::load(kLow));
  // From chunk 2 only 100 tokens remain: 1 s of prefill.
  EXPECT_EQ(policy.decide(2, state(5, 6, 100)), Decision::recompute_rest());
  // Infinite deadline: recomputing always fits.
  EXPECT_EQ(policy.decide(0, state(0, std::numeric_limits<double>::infinity())),
            Decision::recompute_rest());
}

TEST_F(Algorithm1, NothingFitsTakesTheFastestOption) {
  // 0.5 s left. Prefill 200 tokens/s: recomputing (1.5 s) beats three low chunks (3 s).
  EXPECT_EQ(policy.decide(0, state(0, 0.5, 200)), Decision::recompute_rest());
  // Prefill 50 tokens/s: recompute 6 s, low 3 s.
  EXPECT_EQ(policy.decide(0, state(0, 0.5, 50)), Decision::load(kLow));
}

TEST_F(Algorithm1, CountsTokenIdsAndDecodeTime) {
  LoadState s = state(0, 6);
  s.cost.decode_bytes_per_s = 1000;  // doubles every level's time: high 12 s, low 6 s
  EXPECT_EQ(policy.decide(0, s), Decision::load(kLow));
  s = state(0, 3.5, 100);  // recompute: 3 s prefill + 300 tokens x 4 B at 1000 B/s = 4.2 s
  s.cost.token_bytes = 4;
  EXPECT_EQ(policy.decide(0, s), Decision::load(kLow));
}

TEST(FixedLevelPolicy, AlwaysItsLevel) {
  const auto chunks = test::three_level_chunks(3, 100, 4000, 2000, 1000);
  for (const auto& [name, index] :
       {std::pair{"lossless", kLossless}, std::pair{"high", kHigh}, std::pair{"low", kLow}}) {
    FixedLevelPolicy policy(name);
    EXPECT_EQ(policy.name(), std::string("fixed:") + name);
    for (size_t i = 0; i < chunks.size(); ++i) {
      // Whatever the deadline or throughput.
      EXPECT_EQ(policy.decide(i, {0, 0.001, 1, chunks, {}}), Decision::load(index));
      EXPECT_EQ(policy.decide(i, {0, 1e9, 1e12, chunks, {}}), Decision::load(index));
    }
  }
  EXPECT_THROW(FixedLevelPolicy("medium").decide(0, {0, 1, 1, chunks, {}}), Error);
  EXPECT_THROW(FixedLevelPolicy("high").decide(3, {0, 1, 1, chunks, {}}), Error);
  EXPECT_THROW(FixedLevelPolicy(""), Error);
}

TEST(PlannerPolicy, MadeByName) {
  EXPECT_EQ(make_planner_policy("fixed:medium")->name(), "fixed:medium");
  EXPECT_EQ(make_planner_policy("cachegen-alg1")->name(), "cachegen-alg1");
  EXPECT_EQ(make_planner_policy("deadline-planner")->name(), "deadline-planner");
  EXPECT_THROW(make_planner_policy("fastest"), Error);
  EXPECT_THROW(make_planner_policy("fixed:"), Error);
}

TEST(ValidateChunks, NamesWhatIsWrong) {
  auto chunks = test::three_level_chunks(2, 100, 4000, 2000, 1000);
  EXPECT_NO_THROW(validate_chunks(chunks));
  EXPECT_THROW(validate_chunks({}), Error);
  auto bad = chunks;
  bad[1].levels[1].name = "medium";
  try {
    validate_chunks(bad);
    FAIL() << "mismatched level names accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("chunk 1 level 1"), std::string::npos) << e.what();
  }
  bad = chunks;
  bad[0].levels[2].kl = -0.1;
  EXPECT_THROW(validate_chunks(bad), Error);
  bad = chunks;
  bad[1].n_tokens = 0;
  EXPECT_THROW(validate_chunks(bad), Error);
  bad = chunks;
  bad[1].levels.pop_back();
  EXPECT_THROW(validate_chunks(bad), Error);
  CostModel cost;
  cost.prefill_tokens_per_s = 0;
  EXPECT_THROW(validate_cost_model(cost), Error);
}

}  // namespace
}  // namespace cachegen
