// llama.cpp's saved state files: parse, rebuild byte-identically, and load what we wrote.
#include <gtest/gtest.h>
#include <llama.h>

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

class StateFile : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cachegen_llama_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_P(StateFile, SequenceFileRoundTripsAndLoads) {
  CACHEGEN_REQUIRE_MODEL(model);
  const std::vector<int32_t> tokens = test::story_tokens(*model, 24);
  auto a = test::make_context(*model, GetParam());
  a->decode(tokens, 0, false);
  const auto path = dir_ / "seq.bin";
  ASSERT_GT(llama_state_seq_save_file(a->get(), path.c_str(), 0, tokens.data(), tokens.size()), 0u);
  const std::vector<uint8_t> raw = read_all(path);
  const KvSnapshot s = parse_state_file(raw);
  EXPECT_EQ(s.kind, StateKind::sequence);
  EXPECT_EQ(s.tokens, tokens);
  EXPECT_EQ(build_state_file(s), raw);

  // A rebuilt file loads in llama.cpp and continues exactly like the original.
  const auto rebuilt = dir_ / "rebuilt.bin";
  write_all(rebuilt, build_state_file(s));
  auto b = test::make_context(*model, GetParam());
  std::vector<int32_t> loaded(64);
  size_t n_loaded = 0;
  ASSERT_GT(llama_state_seq_load_file(b->get(), rebuilt.c_str(), 0, loaded.data(), loaded.size(),
                                      &n_loaded),
            0u);
  ASSERT_EQ(n_loaded, tokens.size());
  const std::vector<int32_t> next{tokens[1], tokens[2]};
  EXPECT_EQ(b->decode(next, static_cast<int32_t>(tokens.size()), true),
            a->decode(next, static_cast<int32_t>(tokens.size()), true));
}

TEST_P(StateFile, SessionFileRoundTrips) {
  CACHEGEN_REQUIRE_MODEL(model);
  const std::vector<int32_t> tokens = test::story_tokens(*model, 20);
  auto a = test::make_context(*model, GetParam());
  a->decode(tokens, 0, false);
  const auto path = dir_ / "session.bin";
  ASSERT_TRUE(llama_state_save_file(a->get(), path.c_str(), tokens.data(), tokens.size()));
  const std::vector<uint8_t> raw = read_all(path);
  const KvSnapshot s = parse_state_file(raw);
  EXPECT_EQ(s.kind, StateKind::context);
  EXPECT_EQ(s.arch_tag, model->identity().architecture);
  EXPECT_EQ(s.tokens, tokens);
  EXPECT_EQ(build_state_file(s), raw);
  for (size_t n = 0; n < raw.size(); n += 7) {
    EXPECT_THROW(parse_state_file(std::span(raw.data(), n)), Error) << n;
  }
}

INSTANTIATE_TEST_SUITE_P(FlashAttn, StateFile, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "flash" : "noflash"; });

TEST(StateFileHeader, MagicAndVersionAreChecked) {
  std::vector<uint8_t> b = {'q', 's', 'g', 'g', 3, 0, 0, 0, 0, 0, 0, 0};
  b[4] = 2;  // 'ggsq' version 2
  try {
    parse_state_file(b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported_version);
  }
  b[0] = 'x';
  try {
    parse_state_file(b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_input);
  }
}

}  // namespace
}  // namespace cachegen::llama
