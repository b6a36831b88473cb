// A small run of the quality evaluation: lossless row exact, sizes and KL ordered sensibly.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "cachegen/error.h"
#include "llama_test_support.h"

namespace cachegen::llama {
namespace {

// A small run's rows (a short text written for it, `sweep` as given).
std::vector<EvalRow> small_run(const std::string& sweep, int n_contexts) {
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
  o.n_contexts = n_contexts;
  o.prefix = 64;
  o.n_continue = 8;
  o.n_threads = 1;
  o.sweep = sweep;
  const std::vector<EvalRow> rows = evaluate_kv_quality(o, {});
  std::filesystem::remove(text);
  return rows;
}

TEST(Eval, SmallRunGivesSaneTable) {
  CACHEGEN_REQUIRE_MODEL(model);
  const std::vector<EvalRow> rows = small_run("", 2);
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
  // Quality levels: lossless exact, then strictly smaller and no better in KL. Every row of
  // ours is priced as the whole .cgkv file (so lossless is below fp16 but above 8 bits here).
  EXPECT_EQ(find("level-lossless").kl, 0.0);
  EXPECT_LT(find("level-lossless").bits_per_element, 16.0);
  EXPECT_GT(find("level-lossless").bits_per_element, 8.0);
  for (const char* ours : {"codec-8b", "codec-4b", "codec-K3V2", "level-"}) {
    EXPECT_EQ(find(ours).priced, "file") << ours;
    EXPECT_EQ(find(ours).family, "ours") << ours;
  }
  EXPECT_EQ(find("llama.cpp q8_0").family, "llama.cpp");
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

// `--sweep rate`: rows of every family; our ladder grows in bits and (loosely) falls in KL.
TEST(Eval, RateSweepHasEveryFamily) {
  CACHEGEN_REQUIRE_MODEL(model);
  const std::vector<EvalRow> rows = small_run("rate", 1);
  std::map<std::string, int> families;
  std::vector<const EvalRow*> ladder;
  for (const EvalRow& r : rows) {
    families[r.family] += 1;
    EXPECT_TRUE(std::isfinite(r.bits_per_element) && r.bits_per_element > 0) << r.method;
    EXPECT_GE(r.kl, 0.0) << r.method;
    if (r.family == "ours") {
      EXPECT_EQ(r.priced, "file") << r.method;
    }
    if (r.family == "kivi" || r.family == "turboquant") {
      EXPECT_EQ(r.priced, "layout") << r.method;
    }
    if (r.method.rfind("KR", 0) == 0) ladder.push_back(&r);
  }
  EXPECT_EQ(families["ours"], 12);  // lossless, 1..8 bits, high, medium, low
  EXPECT_EQ(families["kivi"], 5);
  EXPECT_EQ(families["turboquant"], 5);
  EXPECT_EQ(families["llama.cpp"], 2);
  ASSERT_EQ(ladder.size(), 8u);
  for (size_t i = 1; i < ladder.size(); ++i) {
    EXPECT_GT(ladder[i]->bits_per_element, ladder[i - 1]->bits_per_element) << ladder[i]->method;
  }
  EXPECT_LT(ladder.back()->kl, ladder.front()->kl);
  EvalOptions bad;
  bad.sweep = "nope";
  try {
    evaluate_kv_quality(bad, {});
    ADD_FAILURE() << "an unknown sweep was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.message().find("sweep"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace cachegen::llama
