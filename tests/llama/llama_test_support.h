// Shared fixture for the llama adapter tests: one model for the whole run, or a loud skip.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cachegen/llama.h"

namespace cachegen::llama::test {

// $CACHEGEN_MODEL, then ../shared/models/stories260K.gguf relative to the repository root;
// empty when neither exists.
std::string find_test_model();

// The loaded model, or nullptr (after printing why) when none was found.
const Model* test_model();

// Deterministic tokens of a short story (tokenized with BOS), at least n of them.
std::vector<int32_t> story_tokens(const Model& model, size_t n);

// Fresh context with the given flash-attention setting and KV type.
std::unique_ptr<Context> make_context(const Model& model, bool flash_attn,
                                      int32_t kv_type = kTypeF16, uint32_t n_ctx = 256);

// Raw llama_state_seq_get_data bytes of sequence 0.
std::vector<uint8_t> raw_seq_state(Context& ctx);

// KL(p || q) of softmax(logits) rows of n_vocab, averaged over rows.
double mean_kl(const std::vector<float>& p, const std::vector<float>& q, size_t n_vocab);

}  // namespace cachegen::llama::test

#define CACHEGEN_REQUIRE_MODEL(model)                                            \
  const ::cachegen::llama::Model* model = ::cachegen::llama::test::test_model(); \
  if (model == nullptr) GTEST_SKIP() << "no GGUF model: set CACHEGEN_MODEL"
