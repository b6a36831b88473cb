// Small hand-made contexts for the planner tests.
#pragma once

#include <cstdint>
#include <vector>

#include "cachegen/planner.h"
#include "cachegen/planner_sim.h"

namespace cachegen::test {

// `n` chunks of `tokens` tokens with three levels (best first):
//   lossless: lossless_bytes, KL 0;  high: high_bytes, KL 0.01;  low: low_bytes, KL 0.1.
inline std::vector<ChunkOptions> three_level_chunks(size_t n, uint32_t tokens,
                                                    uint64_t lossless_bytes, uint64_t high_bytes,
                                                    uint64_t low_bytes) {
  std::vector<ChunkOptions> chunks(n);
  for (ChunkOptions& c : chunks) {
    c.n_tokens = tokens;
    c.levels = {
        {"lossless", lossless_bytes, 0}, {"high", high_bytes, 0.01}, {"low", low_bytes, 0.1}};
  }
  return chunks;
}
inline constexpr size_t kLossless = 0, kHigh = 1, kLow = 2;

// A cost model where only prefill costs: no decode time, no token ids sent.
inline CostModel prefill_only(double tokens_per_s) {
  CostModel cost;
  cost.prefill_tokens_per_s = tokens_per_s;
  cost.token_bytes = 0;
  return cost;
}

// A 7B-class geometry (Mistral-7B: 32 layers x K,V x 8 KV heads x 128) with the measured levels:
// per 256-token chunk lossless 27.5 MB, high 9.4 MB, medium 3.0 MB, low 2.6 MB.
inline constexpr double kElementsPerToken7B = kPaperElementsPerToken;
inline constexpr double kGbps = 1e9 / 8;  // bytes/s
inline std::vector<ChunkOptions> paper_chunks(size_t n_chunks = 32) {
  const auto levels = measured_quality_levels();
  return uniform_chunks(n_chunks, 256, kElementsPerToken7B, levels);
}

}  // namespace cachegen::test
