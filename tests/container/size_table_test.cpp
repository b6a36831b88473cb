// The size table: bits per element of fixed test cases, kept in tests/data/size_table.json and
// updated on purpose (zstd's habit). An encoder change that moves any size fails here until the
// table is regenerated with CACHEGEN_UPDATE_SIZE_TABLE=1 and the change is reviewed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "cachegen/codec.h"
#include "cachegen/container.h"
#include "cachegen/npy.h"
#include "container/container_test_util.h"
#include "support/test_data.h"

namespace cachegen {
namespace {

const std::string kTable = std::string(CACHEGEN_TEST_DATA_DIR) + "/size_table.json";

double bits_per(size_t bytes, size_t elements) {
  return elements ? 8.0 * bytes / elements : 0.0;
}
double round4(double v) {
  return std::round(v * 1e4) / 1e4;
}

// The .npy KV arrays shipped beside the checkout (never committed), when present.
std::string shared_kv(const std::string& name) {
  const std::string p = std::string(CACHEGEN_TEST_DATA_DIR) + "/../../../shared/data/kv/" + name;
  return std::filesystem::exists(p) ? p : "";
}

std::map<std::string, double> measure() {
  std::map<std::string, double> m;
  for (const char* name : {"correlated", "iid"}) {
    for (int bits : {3, 4}) {
      const std::string file =
          std::string("bench_") + name + "_" + std::to_string(bits) + "bit_input.npy";
      const std::vector<float> x = test::golden_f32(file);
      m[std::string("seed_") + name + "_" + std::to_string(bits) + "bit"] =
          round4(bits_per(encode_values(x, 256, 128, bits, 32).size(), x.size()));
    }
  }
  KVCacheConfig cfg;
  cfg.block_tokens = 128;
  const test::Filled f = test::filled_cache(512, cfg);
  m["synthetic_cache_4bit_schedule"] = round4(bits_per(write_cgkv(f.cache).size(), f.kv.size()));
  m["synthetic_lossless"] = round4(
      bits_per(write_cgkv_lossless(test::small_shape(), f.kv, 512, 128).size(), f.kv.size()));
  if (const std::string p = shared_kv("stories260K_dev_ctx00.npy"); !p.empty()) {
    const NpyArray a = read_npy(p);
    ModelShape s;
    s.n_layers = static_cast<int>(a.shape[0]);
    s.n_kv_heads = static_cast<int>(a.shape[3]);
    s.head_dim = static_cast<int>(a.shape[4]);
    const size_t T = a.shape[2], plane = T * a.shape[3] * a.shape[4];
    for (int bits : {4, 6}) {
      KVCacheConfig c;
      c.base_bits = bits;
      KVCache cache = KVCacheBuilder::for_model(s, c);
      for (size_t l = 0; l < cache.layers.size(); ++l) {
        const Half* k = a.as<Half>().data() + 2 * l * plane;
        cache.layers[l].append({k, KVDType::f16, a.shape[3], T, a.shape[4], true},
                               {k + plane, KVDType::f16, a.shape[3], T, a.shape[4], true});
      }
      m["stories260K_ctx00_" + std::to_string(bits) + "bit_schedule"] =
          round4(bits_per(write_cgkv(cache).size(), a.size()));
    }
    m["stories260K_ctx00_lossless"] =
        round4(bits_per(write_cgkv_lossless(s, a.as<Half>(), T, 256).size(), a.size()));
  }
  return m;
}

TEST(SizeTable, MatchesTheCheckedInTable) {
  const std::map<std::string, double> now = measure();
  if (std::getenv("CACHEGEN_UPDATE_SIZE_TABLE")) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : now) j[k] = v;
    std::ofstream(kTable) << j.dump(2) << "\n";
    GTEST_SKIP() << "size table rewritten: " << kTable;
  }
  std::ifstream in(kTable);
  ASSERT_TRUE(in) << "missing " << kTable << " (run with CACHEGEN_UPDATE_SIZE_TABLE=1)";
  const nlohmann::json want = nlohmann::json::parse(in);
  std::string diffs;
  for (const auto& [k, v] : now) {
    if (!want.contains(k)) {
      diffs += "  new case " + k + "\n";
    } else if (std::fabs(want[k].get<double>() - v) > 1e-9) {
      diffs += "  " + k + ": table " + std::to_string(want[k].get<double>()) + ", now " +
               std::to_string(v) + "\n";
    }
  }
  for (auto it = want.begin(); it != want.end(); ++it) {
    // Cases needing the shared KV data are absent without it; anything else is a lost case.
    if (!now.count(it.key()) && it.key().rfind("stories260K", 0) != 0)
      diffs += "  lost case " + it.key() + "\n";
  }
  if (now.count("stories260K_ctx00_lossless") == 0) {
    std::printf("*** shared KV data not found: the stories260K size cases were not measured\n");
  }
  EXPECT_TRUE(diffs.empty()) << "bits/element changed (if intended, rerun with "
                                "CACHEGEN_UPDATE_SIZE_TABLE=1 and commit the table):\n"
                             << diffs;
}

}  // namespace
}  // namespace cachegen
