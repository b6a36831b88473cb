// A small run of the quality evaluation: lossless row exact, sizes and KL ordered sensibly.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "llama_test_support.h"

namespace cachegen::llama {
namespace {

TEST(Eval, SmallRunGivesSaneTable) {
  CACHEGEN_REQUIRE_MODEL(model);
  const auto text = std::filesystem::temp_directory_path() /
                    ("cachegen_eval_" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream f(text);
    for (int i = 0; i < 40; ++i) {
      f << "Once upon a time, there was a little boy named Tim. He liked to run and jump in the "
           "sun. One day he found a shiny stone by the river and showed it to his mom. ";
    }
  }
  EvalOptions o;
  o.model_path = test::find_test_model();
  o.text_path = text.string();
  o.n_contexts = 2;
  o.prefix = 64;
  o.n_continue = 8;
  o.n_threads = 1;
  const std::vector<EvalRow> rows = evaluate_kv_quality(o, {});
  std::filesystem::remove(text);
  ASSERT_FALSE(rows.empty());
  const auto find = [&](const std::string& prefix) -> const EvalRow& {
    for (const EvalRow& r : rows) {
      if (r.method.rfind(prefix, 0) == 0) return r;
    }
    ADD_FAILURE() << "no row " << prefix;
    return rows.front();
  };
  EXPECT_EQ(find("fp16").kl, 0.0);
  EXPECT_EQ(find("fp16").top1, 1.0);
  EXPECT_DOUBLE_EQ(find("fp16").bits_per_element, 16.0);
  EXPECT_NEAR(find("ref-4b").bits_per_element, 4.0 + 32.0 / 32, 0.01);  // codes + fp16 params
  EXPECT_NEAR(find("llama.cpp q8_0").bits_per_element, 8.5, 1e-9);
  EXPECT_LT(find("codec-8b").kl, find("codec-3b").kl);
  EXPECT_LT(find("codec-4b").bits_per_element, find("codec-8b").bits_per_element);
  // Quality levels: lossless exact, then strictly smaller and no better in KL.
  EXPECT_EQ(find("level-lossless").kl, 0.0);
  EXPECT_DOUBLE_EQ(find("level-lossless").bits_per_element, 16.0);
  EXPECT_LT(find("level-high").bits_per_element, find("codec-8b").bits_per_element);
  EXPECT_LT(find("level-medium").bits_per_element, find("level-high").bits_per_element);
  EXPECT_LT(find("level-low").bits_per_element, find("level-medium").bits_per_element);
  EXPECT_LT(find("level-high").kl, find("level-low").kl);
  // The high level keeps the distributions close even on this short run.
  EXPECT_LT(find("level-high").kl, 0.01);
  for (const EvalRow& r : rows) {
    EXPECT_GE(r.kl, 0.0) << r.method;
    EXPECT_GT(r.ppl, 0.0) << r.method;
    EXPECT_EQ(r.ppl_exact, rows.front().ppl_exact);
  }
}

}  // namespace
}  // namespace cachegen::llama
