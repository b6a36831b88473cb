// ContextStore: chained keys, manifests, lookups, verified values, concurrent writers; on a
// FileStore and on a real redis-server.
#include "cachegen/context_store.h"

#include <gtest/gtest.h>

#include <thread>

#include "cachegen/container.h"
#include "cachegen/error.h"
#include "store/redis_server.h"
#include "store/store_test_support.h"

namespace cachegen::test {
namespace {

constexpr size_t kChunk = 16;

std::vector<int32_t> tokens_of(size_t n, int32_t salt = 0) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7 + 3) % 500) + salt;
  return t;
}

// A small lossless .cgkv of a chunk: fp16 K/V of 1 layer x 1 head x 4 channels, with the token
// ids blob (what an engine adapter writes).
std::vector<uint8_t> chunk_value(std::span<const int32_t> tokens, float bias) {
  ModelShape shape;
  shape.n_layers = 1;
  shape.n_kv_heads = 1;
  shape.head_dim = 4;
  std::vector<Half> kv(2 * tokens.size() * 4);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = float_to_half(bias + static_cast<float>(i % 13));
  const CgkvBlob blob = token_ids_blob(tokens);
  return write_cgkv_lossless(shape, kv, tokens.size(), tokens.size(), std::span(&blob, 1), 1);
}

class ContextStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "file") {
      dir_ = std::make_unique<TempDir>();
      store_ = open_file_store(dir_->path());
    } else {
      RedisServer& server = RedisServer::shared();
      server.command({"FLUSHALL"});
      store_ = open_redis_store("127.0.0.1", server.port(), 0, test_redis_options());
    }
    ContextStoreOptions o;
    o.chunk_tokens = kChunk;
    ctx_ = std::make_unique<ContextStore>(*store_, "model-A", o);
  }
  // Stores every whole chunk of `tokens` at `level`.
  void put_all(ContextStore& cs, std::span<const int32_t> tokens, const std::string& level) {
    for (size_t i = 0; i < tokens.size() / kChunk; ++i) {
      cs.put_chunk(tokens, i, level, chunk_value(tokens.subspan(i * kChunk, kChunk), 1.0f));
    }
  }
  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ContextStore> ctx_;
};

TEST_P(ContextStoreTest, KeysAreChainedAndModelSpecific) {
  const std::vector<int32_t> a = tokens_of(3 * kChunk + 5);
  std::vector<int32_t> b = a;
  b[kChunk + 2] += 1;  // differs in chunk 1
  const std::vector<ChunkKey> ka = ctx_->chunk_keys(a), kb = ctx_->chunk_keys(b);
  ASSERT_EQ(ka.size(), 3u);  // whole chunks only
  EXPECT_EQ(ka[0], kb[0]);
  EXPECT_FALSE(ka[1] == kb[1]);
  EXPECT_FALSE(ka[2] == kb[2]);  // every later chunk follows the change
  ContextStoreOptions o;
  o.chunk_tokens = kChunk;
  const ContextStore other(*store_, "model-B", o);
  EXPECT_FALSE(other.chunk_keys(a)[0] == ka[0]);
  EXPECT_NE(other.manifest_key(ka[0]), ctx_->manifest_key(ka[0]));
}

TEST_P(ContextStoreTest, LookupFindsTheLongestStoredPrefix) {
  const std::vector<int32_t> t = tokens_of(4 * kChunk + 3);
  EXPECT_TRUE(ctx_->lookup(t).empty());
  put_all(*ctx_, std::span(t).first(2 * kChunk), "high");
  std::vector<StoredChunk> found = ctx_->lookup(t);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[1].first_token, kChunk);
  ASSERT_EQ(found[0].levels.size(), 1u);
  EXPECT_EQ(found[0].levels[0].level, "high");
  // A prompt sharing only the first chunk reuses that chunk.
  std::vector<int32_t> u = t;
  u[kChunk] += 1;
  EXPECT_EQ(ctx_->lookup(u).size(), 1u);
  // Another model sees nothing.
  ContextStoreOptions o;
  o.chunk_tokens = kChunk;
  EXPECT_TRUE(ContextStore(*store_, "model-B", o).lookup(t).empty());
  // A second level lands in the same manifest; values round-trip verified.
  put_all(*ctx_, std::span(t).first(2 * kChunk), "lossless");
  found = ctx_->lookup(t);
  ASSERT_EQ(found[0].levels.size(), 2u);
  EXPECT_EQ(found[0].levels[0].level, "high");
  EXPECT_EQ(found[0].levels[1].level, "lossless");
  const auto v = ctx_->get_chunk(found[1], "lossless", std::span(t).subspan(kChunk, kChunk));
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, chunk_value(std::span(t).subspan(kChunk, kChunk), 1.0f));
  EXPECT_FALSE(ctx_->get_chunk(found[1], "low", std::span(t).subspan(kChunk, kChunk)));
}

TEST_P(ContextStoreTest, PutIsIdempotent) {
  const std::vector<int32_t> t = tokens_of(kChunk);
  put_all(*ctx_, t, "high");
  const std::vector<std::string> keys = store_->list();
  put_all(*ctx_, t, "high");
  EXPECT_EQ(store_->list(), keys);
  EXPECT_EQ(keys.size(), 2u);  // manifest + one value
}

TEST_P(ContextStoreTest, DamagedOrForeignValuesAreRejected) {
  const std::vector<int32_t> t = tokens_of(2 * kChunk);
  put_all(*ctx_, t, "high");
  std::vector<StoredChunk> found = ctx_->lookup(t);
  ASSERT_EQ(found.size(), 2u);
  const ChunkLevelEntry e = found[1].levels[0];
  const std::string vkey = ctx_->value_key(found[1].key, "high", e.checksum);
  // Flipped byte: the manifest's checksum catches it.
  std::vector<uint8_t> v = store_->get(vkey);
  v[v.size() / 2] ^= 1;
  store_->put(vkey, v);
  try {
    (void)ctx_->get_chunk(found[1], "high", std::span(t).subspan(kChunk, kChunk));
    ADD_FAILURE() << "damaged value accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::corrupt_input);
  }
  // A colliding key holding another chunk's value (its manifest rewritten to match): the token
  // ids inside the value catch it.
  const std::vector<uint8_t> foreign = chunk_value(std::span(t).first(kChunk), 1.0f);
  ctx_->put_chunk(t, 1, "low", foreign);
  found = ctx_->lookup(t);
  try {
    (void)ctx_->get_chunk(found[1], "low", std::span(t).subspan(kChunk, kChunk));
    ADD_FAILURE() << "a value of other tokens accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::corrupt_input);
    EXPECT_NE(std::string(err.what()).find("token ids"), std::string::npos) << err.what();
  }
  // A damaged manifest ends the prefix there, with a reason.
  std::vector<uint8_t> m = store_->get(ctx_->manifest_key(found[1].key));
  m[20] ^= 1;
  store_->put(ctx_->manifest_key(found[1].key), m);
  std::string why;
  EXPECT_EQ(ctx_->lookup(t, &why).size(), 1u);
  EXPECT_NE(why.find("chunk 1"), std::string::npos) << why;
}

TEST_P(ContextStoreTest, ConcurrentWritersOfTheSamePrefixMergeTheirLevels) {
  const std::vector<int32_t> t = tokens_of(3 * kChunk);
  std::vector<std::thread> writers;
  const std::vector<std::string> levels = {"lossless", "high", "medium", "low"};
  for (const std::string& level : levels) {
    writers.emplace_back([&, level] {
      std::unique_ptr<Store> s = GetParam() == "file"
                                     ? open_file_store(dir_->path())
                                     : open_redis_store("127.0.0.1", RedisServer::shared().port(),
                                                        0, test_redis_options());
      ContextStoreOptions o;
      o.chunk_tokens = kChunk;
      ContextStore cs(*s, "model-A", o);
      try {
        for (int round = 0; round < 3; ++round) put_all(cs, t, level);
      } catch (const std::exception& e) {
        ADD_FAILURE() << level << ": " << e.what();
      }
    });
  }
  for (std::thread& w : writers) w.join();
  // Whatever interleaving: every manifest decodes and every level it lists verifies.
  std::vector<StoredChunk> found = ctx_->lookup(t);
  ASSERT_EQ(found.size(), 3u);
  for (const StoredChunk& c : found) {
    EXPECT_FALSE(c.levels.empty());
    for (const ChunkLevelEntry& e : c.levels) {
      EXPECT_TRUE(ctx_->get_chunk(c, e.level, std::span(t).subspan(c.first_token, kChunk)));
    }
  }
  // An entry a racing writer dropped is restored by the next put of that level (the value was
  // never lost).
  for (const std::string& level : levels) put_all(*ctx_, t, level);
  found = ctx_->lookup(t);
  for (const StoredChunk& c : found) EXPECT_EQ(c.levels.size(), levels.size());
}

TEST(ContextManifest, HostileBytesGiveClearErrors) {
  StoredChunk c;
  c.index = 3;
  c.n_tokens = 256;
  c.key.bytes[0] = 7;
  c.levels = {{"high", 100, 5}, {"lossless", 300, 9}};
  const std::vector<uint8_t> good = ContextStore::encode_manifest(c.key, c);
  const StoredChunk back = ContextStore::decode_manifest(good, c.key);
  EXPECT_EQ(back.levels, c.levels);
  EXPECT_EQ(back.index, 3u);
  for (size_t n = 0; n < good.size(); ++n) {  // every truncation
    EXPECT_THROW((void)ContextStore::decode_manifest(std::span(good).first(n), c.key), Error);
  }
  for (size_t i = 0; i < good.size(); ++i) {  // every single-bit flip
    std::vector<uint8_t> bad = good;
    bad[i] ^= 0x10;
    EXPECT_THROW((void)ContextStore::decode_manifest(bad, c.key), Error) << "byte " << i;
  }
  ChunkKey other = c.key;
  other.bytes[1] = 1;
  EXPECT_THROW((void)ContextStore::decode_manifest(good, other), Error);
  EXPECT_THROW(check_level_name("High"), Error);
  EXPECT_THROW(check_level_name(""), Error);
  EXPECT_THROW(check_level_name(std::string(33, 'a')), Error);
}

INSTANTIATE_TEST_SUITE_P(Stores, ContextStoreTest, ::testing::Values("file", "redis"));

}  // namespace
}  // namespace cachegen::test
