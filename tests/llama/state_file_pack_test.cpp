// `cachegen llama pack/unpack` at library level: a state file saved by llama.cpp itself, packed
// into .cgkv, unpacked, and loaded by llama.cpp into a fresh context: identical next-token
// logits for the lossless level, close ones for a quantized level.
#include <gtest/gtest.h>
#include <llama.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "cachegen/error.h"
#include "llama_test_support.h"

namespace cachegen::llama {
namespace {

std::vector<uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void write_all(const std::filesystem::path& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// pack + unpack as the CLI does them: the identity recorded is the loading model's.
std::vector<uint8_t> pack_unpack(const std::vector<uint8_t>& state_file, const ModelIdentity& id,
                                 const SnapshotEncoding& level) {
  const KvSnapshot s = parse_state_file(state_file);
  const std::vector<uint8_t> cgkv = snapshot_to_cgkv(s, id, level);
  EXPECT_LT(cgkv.size(), state_file.size());
  return build_state_file(cgkv_to_snapshot(CgkvReader::from_bytes(cgkv)));
}

class StateFilePack : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cachegen_pack_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_P(StateFilePack, SequenceFileLoadsInLlamaCpp) {
  CACHEGEN_REQUIRE_MODEL(model);
  const bool flash = GetParam();
  const std::vector<int32_t> tokens = test::story_tokens(*model, 72);
  const std::span<const int32_t> prefix(tokens.data(), 64), next(tokens.data() + 64, 8);
  auto a = test::make_context(*model, flash);
  a->decode(prefix, 0, false);
  const auto saved = dir_ / "seq.bin";
  ASSERT_GT(llama_state_seq_save_file(a->get(), saved.c_str(), 0, prefix.data(), prefix.size()),
            0u);
  const std::vector<float> expected = a->decode(next, 64, true);
  const std::vector<uint8_t> raw = read_all(saved);

  for (const bool lossless : {true, false}) {
    const SnapshotEncoding level = lossless ? SnapshotEncoding::exact() : SnapshotEncoding::bits(6);
    const std::vector<uint8_t> unpacked = pack_unpack(raw, model->identity(), level);
    if (lossless) {
      EXPECT_EQ(unpacked, raw);
    }
    const auto path = dir_ / "unpacked.bin";
    write_all(path, unpacked);
    auto b = test::make_context(*model, flash);
    std::vector<int32_t> loaded(128);
    size_t n_loaded = 0;
    ASSERT_GT(llama_state_seq_load_file(b->get(), path.c_str(), 0, loaded.data(), loaded.size(),
                                        &n_loaded),
              0u);
    ASSERT_EQ(n_loaded, prefix.size());
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), loaded.begin()));
    const std::vector<float> got = b->decode(next, 64, true);
    if (lossless) {
      EXPECT_EQ(got, expected);
    } else {
      EXPECT_LT(test::mean_kl(expected, got, static_cast<size_t>(model->n_vocab())), 5e-3);
    }
  }
}

TEST_P(StateFilePack, SessionFileLoadsInLlamaCpp) {
  CACHEGEN_REQUIRE_MODEL(model);
  const bool flash = GetParam();
  const std::vector<int32_t> tokens = test::story_tokens(*model, 56);
  const std::span<const int32_t> prefix(tokens.data(), 48), next(tokens.data() + 48, 8);
  auto a = test::make_context(*model, flash);
  a->decode(prefix, 0, false);
  const auto saved = dir_ / "session.bin";
  ASSERT_TRUE(llama_state_save_file(a->get(), saved.c_str(), prefix.data(), prefix.size()));
  const std::vector<float> expected = a->decode(next, 48, true);
  const std::vector<uint8_t> raw = read_all(saved);

  // Packed without a model (as `pack` without --model): a partial identity, one head per row.
  ModelIdentity partial;
  partial.architecture = model->identity().architecture;
  for (const bool lossless : {true, false}) {
    const std::vector<uint8_t> unpacked =
        pack_unpack(raw, partial, lossless ? SnapshotEncoding::exact() : SnapshotEncoding::bits(6));
    if (lossless) {
      EXPECT_EQ(unpacked, raw);
    }
    const auto path = dir_ / "unpacked.bin";
    write_all(path, unpacked);
    auto b = test::make_context(*model, flash);
    std::vector<int32_t> loaded(128);
    size_t n_loaded = 0;
    ASSERT_TRUE(
        llama_state_load_file(b->get(), path.c_str(), loaded.data(), loaded.size(), &n_loaded));
    ASSERT_EQ(n_loaded, prefix.size());
    const std::vector<float> got = b->decode(next, 48, true);
    if (lossless) {
      EXPECT_EQ(got, expected);
    } else {
      EXPECT_LT(test::mean_kl(expected, got, static_cast<size_t>(model->n_vocab())), 5e-3);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FlashAttn, StateFilePack, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "flash" : "noflash"; });

}  // namespace
}  // namespace cachegen::llama
