// Internal: what `cachegen eval` and `cachegen calibrate` share — reading the text, and the
// KL divergence of next-token distributions.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cachegen/llama.h"

namespace cachegen::llama::detail {

// The whole text file (not_found naming it when it cannot be opened).
std::string read_text(const std::string& path);
// log softmax of n logits, in double.
std::vector<double> log_softmax(const float* logits, size_t n);
// KL(exact || got) in nats of the distributions two logit rows give (>= 0).
double kl_divergence(const float* exact, const float* got, size_t n);
// A context for windows of `window` tokens (n_ctx rounded up to a multiple of 256).
ContextSettings window_context_settings(size_t window, bool flash_attn, int32_t n_threads);

}  // namespace cachegen::llama::detail
