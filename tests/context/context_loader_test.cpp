// load_prefix: pipelined loading with stop reasons (missing level, damaged value, sink refusal,
// deadline, cancel) and the planner-driven chooser, on a real FileStore.
#include <gtest/gtest.h>

#include "cachegen/container.h"
#include "cachegen/context_loader.h"
#include "cachegen/error.h"
#include "store/redis_server.h"
#include "store/store_test_support.h"

namespace cachegen::test {
namespace {

constexpr size_t kChunk = 16, kChunks = 5;

std::vector<uint8_t> chunk_value(std::span<const int32_t> tokens, size_t width) {
  ModelShape shape;
  shape.n_layers = 1;
  shape.n_kv_heads = 1;
  shape.head_dim = static_cast<int>(width);
  std::vector<Half> kv(2 * tokens.size() * width);
  uint64_t x = 88172645463325252ull;  // xorshift: incompressible values
  for (Half& h : kv) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    h = float_to_half(static_cast<float>(x % 20011) / 97.0f);
  }
  const CgkvBlob blob = token_ids_blob(tokens);
  return write_cgkv_lossless(shape, kv, tokens.size(), tokens.size(), std::span(&blob, 1), 1);
}

// Records what it was given; refuses chunk `refuse` (an engine finding a value unusable).
struct RecordingSink : ChunkSink {
  std::vector<std::pair<size_t, std::string>> got;
  size_t refuse = SIZE_MAX;
  void decode(const StoredChunk& c, std::string_view level, std::span<const uint8_t>) override {
    if (c.index == refuse) throw Error(ErrorCode::corrupt_input, "refused by the sink");
    got.emplace_back(c.index, std::string(level));
  }
};

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = open_file_store(dir_.path());
    ContextStoreOptions o;
    o.chunk_tokens = kChunk;
    cs_ = std::make_unique<ContextStore>(*store_, "m", o);
    for (size_t i = 0; i < kChunks * kChunk + 3; ++i)
      tokens_.push_back(static_cast<int32_t>(i * 5 % 97));
    for (size_t i = 0; i < kChunks; ++i) {
      const auto t = std::span(tokens_).subspan(i * kChunk, kChunk);
      cs_->put_chunk(tokens_, i, "lossless", chunk_value(t, 64));
      cs_->put_chunk(tokens_, i, "low", chunk_value(t, 4));
    }
    chunks_ = cs_->lookup(tokens_);
    ASSERT_EQ(chunks_.size(), kChunks);
  }
  TempDir dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ContextStore> cs_;
  std::vector<int32_t> tokens_;
  std::vector<StoredChunk> chunks_;
};

TEST_F(LoaderTest, LoadsEveryChunkInOrder) {
  RecordingSink sink;
  const LoadReport r = load_prefix(*cs_, tokens_, chunks_, fixed_level_chooser("low"), sink);
  EXPECT_EQ(r.chunks_loaded, kChunks);
  EXPECT_EQ(r.tokens_loaded, kChunks * kChunk);
  EXPECT_TRUE(r.stop_reason.empty()) << r.stop_reason;
  ASSERT_EQ(sink.got.size(), kChunks);
  for (size_t i = 0; i < kChunks; ++i)
    EXPECT_EQ(sink.got[i], std::make_pair(i, std::string("low")));
  EXPECT_GT(r.bytes_fetched, 0u);
}

TEST_F(LoaderTest, StopsAtAMissingLevelADamagedValueOrARefusal) {
  RecordingSink sink;
  LoadReport r = load_prefix(*cs_, tokens_, chunks_, fixed_level_chooser("high"), sink);
  EXPECT_EQ(r.chunks_loaded, 0u);
  EXPECT_NE(r.stop_reason.find("recompute"), std::string::npos) << r.stop_reason;

  const ChunkLevelEntry* e = chunks_[2].find("lossless");
  const std::string key = cs_->value_key(chunks_[2].key, "lossless", e->checksum);
  std::vector<uint8_t> v = store_->get(key);
  v[v.size() / 3] ^= 4;
  store_->put(key, v);
  RecordingSink s2;
  r = load_prefix(*cs_, tokens_, chunks_, fixed_level_chooser("lossless"), s2);
  EXPECT_EQ(r.chunks_loaded, 2u);
  EXPECT_NE(r.stop_reason.find("does not match"), std::string::npos) << r.stop_reason;
  EXPECT_EQ(r.stop, LoadStop::failed);

  store_->remove(key);
  RecordingSink s3;
  r = load_prefix(*cs_, tokens_, chunks_, fixed_level_chooser("lossless"), s3);
  EXPECT_EQ(r.chunks_loaded, 2u);
  EXPECT_NE(r.stop_reason.find("missing"), std::string::npos) << r.stop_reason;
  EXPECT_EQ(r.stop, LoadStop::missing);

  RecordingSink s4;
  s4.refuse = 1;
  r = load_prefix(*cs_, tokens_, chunks_, fixed_level_chooser("low"), s4);
  EXPECT_EQ(r.chunks_loaded, 1u);
  EXPECT_NE(r.stop_reason.find("refused by the sink"), std::string::npos) << r.stop_reason;
}

TEST_F(LoaderTest, DeadlineAndCancelStopFetching) {
  RecordingSink sink;
  LoadOptions o;
  o.deadline_s = 0;
  LoadReport r = load_prefix(*cs_, tokens_, chunks_, fixed_level_chooser("low"), sink, o);
  EXPECT_EQ(r.chunks_loaded, 0u);
  EXPECT_NE(r.stop_reason.find("deadline"), std::string::npos) << r.stop_reason;
  std::atomic<bool> cancel{true};
  LoadOptions c;
  c.cancel = &cancel;
  r = load_prefix(*cs_, tokens_, chunks_, fixed_level_chooser("low"), sink, c);
  EXPECT_EQ(r.chunks_loaded, 0u);
  EXPECT_EQ(r.stop_reason, "cancelled");
  EXPECT_EQ(r.stop, LoadStop::cancelled);
}

TEST_F(LoaderTest, PlannedChooserPicksWhatFitsTheDeadline) {
  const std::vector<std::pair<std::string, double>> kl = {{"lossless", 0.0}, {"low", 0.09}};
  CostModel cost;
  cost.prefill_tokens_per_s = 1e-3;  // recomputing is hopeless
  const auto policy = make_planner_policy("deadline-planner");
  // No deadline: the best level everywhere.
  RecordingSink best;
  LoadReport r = load_prefix(
      *cs_, tokens_, chunks_,
      planned_chooser(*policy, chunks_, kl, cost, std::numeric_limits<double>::infinity(), 1e9),
      best);
  ASSERT_EQ(r.chunks_loaded, kChunks);
  for (const auto& [i, level] : best.got) EXPECT_EQ(level, "lossless") << i;
  // A link so slow (by the initial estimate) that only the small level fits.
  const uint64_t low_total = [&] {
    uint64_t n = 0;
    for (const StoredChunk& c : chunks_) n += c.find("low")->bytes;
    return n;
  }();
  RecordingSink small;
  r = load_prefix(
      *cs_, tokens_, chunks_,
      planned_chooser(*policy, chunks_, kl, cost, 1000.0, static_cast<double>(low_total) / 500.0),
      small);
  // Lossless is 16x wider: by the initial estimate no chunk can afford it within 1000 s of a
  // 500 s load, so the first chunk is low. The loopback link then proves fast, and the default
  // planner (SlackPlannerPolicy, which learns the mean rate) may upgrade the last chunks.
  ASSERT_EQ(small.got.size(), kChunks) << r.stop_reason;
  EXPECT_EQ(small.got.at(0).second, "low");
  const auto greedy = make_planner_policy("deadline-planner-greedy");
  RecordingSink small_greedy;
  r = load_prefix(
      *cs_, tokens_, chunks_,
      planned_chooser(*greedy, chunks_, kl, cost, 1000.0, static_cast<double>(low_total) / 500.0),
      small_greedy);
  ASSERT_EQ(small_greedy.got.size(), kChunks) << r.stop_reason;
  // The greedy planner learns the fast link too (its window starts full of the initial
  // estimate): later chunks depend on real timings, the first one does not.
  EXPECT_EQ(small_greedy.got.at(0).second, "low");
  EXPECT_THROW(planned_chooser(*policy, chunks_, {{"high", 0.0}}, cost, 1, 1e6), Error);
}

}  // namespace
}  // namespace cachegen::test

namespace cachegen::test {
namespace {

// A real redis-server killed in the middle of a load: the load stops with the reason, every
// chunk it reports loaded was decoded, and after a restart (data gone) nothing is reused.
TEST(LoaderRedisFaults, ServerKilledMidLoadAndRestarted) {
  RedisServer server;
  std::unique_ptr<Store> store =
      open_redis_store("127.0.0.1", server.port(), 0, test_redis_options());
  ContextStoreOptions o;
  o.chunk_tokens = kChunk;
  ContextStore cs(*store, "m", o);
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < 8 * kChunk; ++i) tokens.push_back(static_cast<int32_t>(i * 3 % 91));
  for (size_t i = 0; i < 8; ++i) {
    cs.put_chunk(tokens, i, "lossless",
                 chunk_value(std::span(tokens).subspan(i * kChunk, kChunk), 64));
  }
  const std::vector<StoredChunk> chunks = cs.lookup(tokens);
  ASSERT_EQ(chunks.size(), 8u);
  struct KillingSink : RecordingSink {
    RedisServer* server = nullptr;
    void decode(const StoredChunk& c, std::string_view level, std::span<const uint8_t> v) override {
      if (c.index == 1) server->kill_hard();
      RecordingSink::decode(c, level, v);
    }
  } sink;
  sink.server = &server;
  LoadOptions lo;
  lo.prefetch = 1;
  const LoadReport r = load_prefix(cs, tokens, chunks, fixed_level_chooser("lossless"), sink, lo);
  EXPECT_LT(r.chunks_loaded, 8u);
  EXPECT_GE(r.chunks_loaded, 2u);
  EXPECT_EQ(sink.got.size(), r.chunks_loaded);
  EXPECT_NE(r.stop_reason.find("fetching failed"), std::string::npos) << r.stop_reason;
  server.restart();
  std::unique_ptr<Store> again =
      open_redis_store("127.0.0.1", server.port(), 0, test_redis_options());
  ContextStore cs2(*again, "m", o);
  EXPECT_TRUE(cs2.lookup(tokens).empty());  // a restarted empty server: everything recomputed
}

}  // namespace
}  // namespace cachegen::test
