#include "llama_test_support.h"

#include <llama.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace cachegen::llama::test {

std::string find_test_model() {
  if (const char* env = std::getenv("CACHEGEN_MODEL"); env != nullptr && *env != '\0') {
    return std::filesystem::exists(env) ? std::string(env) : std::string();
  }
  const std::filesystem::path p =
      std::filesystem::path(CACHEGEN_REPO_ROOT) / ".." / "shared" / "models" / "stories260K.gguf";
  return std::filesystem::exists(p) ? p.string() : std::string();
}

const Model* test_model() {
  static const std::unique_ptr<Model> model = [] {
    const std::string path = find_test_model();
    if (path.empty()) {
      std::fprintf(stderr,
                   "\n*** llama tests SKIPPED: no GGUF model. Set CACHEGEN_MODEL=/path/model.gguf "
                   "or put stories260K.gguf in ../shared/models/ ***\n\n");
      return std::unique_ptr<Model>();
    }
    return std::make_unique<Model>(path);
  }();
  return model.get();
}

std::vector<int32_t> story_tokens(const Model& model, size_t n) {
  std::string text =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her big red ball. One day, she saw a small dog under a tree. ";
  std::vector<int32_t> tokens;
  while ((tokens = model.tokenize(text, true)).size() < n) text += text;
  tokens.resize(n);
  return tokens;
}

std::unique_ptr<Context> make_context(const Model& model, bool flash_attn, int32_t kv_type,
                                      uint32_t n_ctx) {
  ContextSettings s;
  s.n_ctx = n_ctx;
  s.flash_attn = flash_attn;
  s.type_k = s.type_v = kv_type;
  s.n_threads = 1;
  return std::make_unique<Context>(model, s);
}

std::vector<uint8_t> raw_seq_state(Context& ctx) {
  std::vector<uint8_t> bytes(llama_state_seq_get_size(ctx.get(), 0));
  EXPECT_EQ(llama_state_seq_get_data(ctx.get(), bytes.data(), bytes.size(), 0), bytes.size());
  return bytes;
}

double mean_kl(const std::vector<float>& p, const std::vector<float>& q, size_t n_vocab) {
  const size_t rows = p.size() / n_vocab;
  double total = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* a = &p[r * n_vocab];
    const float* b = &q[r * n_vocab];
    double za = 0, zb = 0;
    for (size_t i = 0; i < n_vocab; ++i) {
      za += std::exp(static_cast<double>(a[i]));
      zb += std::exp(static_cast<double>(b[i]));
    }
    for (size_t i = 0; i < n_vocab; ++i) {
      const double lp = a[i] - std::log(za), lq = b[i] - std::log(zb);
      total += std::exp(lp) * (lp - lq);
    }
  }
  return total / static_cast<double>(rows);
}

}  // namespace cachegen::llama::test
