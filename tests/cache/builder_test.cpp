// KVCacheBuilder / KVCacheFactory / configs / GGUF model shape.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cachegen/error.h"
#include "cachegen/kv_cache.h"

namespace cachegen {
namespace {

ModelShape shape(int layers, std::vector<bool> attention = {}) {
  ModelShape s;
  s.architecture = "test";
  s.n_layers = layers;
  s.attention = std::move(attention);
  s.n_kv_heads = 2;
  s.head_dim = 8;
  return s;
}

TEST(Builder, ScheduleOverAttentionLayersOnly) {
  KVCacheConfig cfg;
  const KVCache c =
      KVCacheBuilder::for_model(shape(6, {true, false, true, true, false, true}), cfg);
  ASSERT_EQ(c.layers.size(), 4u);
  EXPECT_EQ(c.layer_index, (std::vector<int>{0, 2, 3, 5}));
  const std::vector<int> want = layer_group_bits(4, 4, 3);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(c.layers[i].key_bits(), want[i]);
    EXPECT_EQ(c.layers[i].value_bits(), want[i]);
  }
}

TEST(Builder, UserBitsRespectedAndSplitKV) {
  KVCacheConfig cfg;
  cfg.layer_bits = {8, 7, 6};
  cfg.value_layer_bits = {3, 2, 1};
  const KVCache c = KVCacheBuilder::for_model(shape(3), cfg);
  EXPECT_EQ(c.layers[0].key_bits(), 8);
  EXPECT_EQ(c.layers[2].key_bits(), 6);
  EXPECT_EQ(c.layers[2].value_bits(), 1);
  cfg.layer_bits = {4, 4};
  EXPECT_THROW(KVCacheBuilder::for_model(shape(3), cfg), Error);
}

TEST(Builder, InvalidConfigsGiveClearErrors) {
  auto expect_msg = [](KVCacheConfig cfg, const char* needle) {
    try {
      KVCacheBuilder::for_model(shape(2), cfg);
      FAIL() << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  KVCacheConfig c;
  c.base_bits = 0;
  expect_msg(c, "base_bits");
  c = {};
  c.layer_groups = 0;
  expect_msg(c, "layer_groups");
  c = {};
  c.group_size = 0;
  expect_msg(c, "group_size");
  c = {};
  c.block_tokens = 100;
  expect_msg(c, "block_tokens");
  c = {};
  c.layer_bits = {4, 9};
  expect_msg(c, "layer_bits[1]");
  EXPECT_THROW(KVCacheBuilder::for_model(shape(0), {}), Error);
  EXPECT_THROW(KVCacheBuilder::for_model(shape(2, {false, false}), {}), Error);
}

TEST(Factory, UniformBits) {
  KVCacheConfig cfg;
  cfg.base_bits = 5;
  const LayerKVCache c = KVCacheFactory::create(cfg, 4, 16);
  EXPECT_EQ(c.key_bits(), 5);
  EXPECT_EQ(c.value_bits(), 5);
  EXPECT_EQ(c.n_kv_heads(), 4u);
}

TEST(Factory, ShapeFromTheFirstAppend) {
  KVCacheConfig cfg;
  LayerKVCache c = KVCacheFactory::create(cfg);
  EXPECT_EQ(c.n_kv_heads(), 0u);
  EXPECT_TRUE(c.fetch_keys().empty());
  std::vector<Half> x(3 * 40 * 4, float_to_half(0.5f));
  const KVBlockView k{x.data(), KVDType::f16, 3, 40, 4}, v = k;
  const KVBlockView odd{x.data(), KVDType::f16, 2, 40, 4};
  EXPECT_THROW(c.append(k, odd), Error);  // k and v disagree: nothing is fixed yet
  EXPECT_EQ(c.n_kv_heads(), 0u);
  c.append(k, v);
  EXPECT_EQ(c.n_kv_heads(), 3u);
  EXPECT_EQ(c.head_dim(), 4u);
  EXPECT_EQ(c.n_tokens(), 40u);
  EXPECT_THROW(c.append(odd, odd), Error);  // now the shape is fixed
  EXPECT_EQ(c.fetch_values().size(), x.size());
}

std::string model_path() {
  if (const char* p = std::getenv("CACHEGEN_MODEL")) return p;
  const std::string p =
      std::string(CACHEGEN_TEST_DATA_DIR) + "/../../../shared/models/stories260K.gguf";
  return std::filesystem::exists(p) ? p : "";
}

TEST(Gguf, ReadsTheSmallModelsShape) {
  const std::string path = model_path();
  if (path.empty()) {
    GTEST_SKIP()
        << "*** no GGUF model: set CACHEGEN_MODEL or put stories260K.gguf in ../shared/models";
  }
  const ModelShape s = ModelShape::from_gguf(path);
  EXPECT_EQ(s.architecture, "llama");
  EXPECT_EQ(s.n_layers, 5);
  EXPECT_EQ(s.n_kv_heads, 4);
  EXPECT_EQ(s.head_dim, 8);
  EXPECT_EQ(s.n_attention_layers(), 5);
  EXPECT_EQ(gguf_metadata_hash(path), gguf_metadata_hash(path));
  EXPECT_NE(gguf_metadata_hash(path), 0u);
}

TEST(Gguf, HostileFilesRejected) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    return dir + "/" + name;
  };
  EXPECT_THROW(ModelShape::from_gguf(write("a.gguf", "NOPE")), Error);
  EXPECT_THROW(ModelShape::from_gguf(write("b.gguf", std::string("GGUF\x03\0\0\0", 8))), Error);
  std::string huge("GGUF\x03\0\0\0", 8);
  huge += std::string(8, '\0');                                // tensors
  huge += std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8);  // n_kv huge
  EXPECT_THROW(ModelShape::from_gguf(write("c.gguf", huge)), Error);
  EXPECT_THROW(ModelShape::from_gguf(dir + "/missing.gguf"), Error);
  const std::string path = model_path();
  if (!path.empty()) {  // every truncation of the real header is an error, never a crash
    std::ifstream in(path, std::ios::binary);
    std::string head(4096, '\0');
    in.read(head.data(), 4096);
    for (size_t n : {10, 24, 25, 100, 1000, 4096}) {
      EXPECT_THROW(ModelShape::from_gguf(write("t.gguf", head.substr(0, n))), Error) << n;
    }
  }
}

}  // namespace
}  // namespace cachegen
