// Validation of a context's chunk options and the time model shared by every policy.
#include <cmath>
#include <string>

#include "cachegen/planner.h"
#include "core/checks.h"

namespace cachegen {

void validate_chunks(std::span<const ChunkOptions> chunks) {
  if (chunks.empty()) detail::invalid("planner: a context needs at least one chunk");
  const auto& first = chunks[0].levels;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkOptions& c = chunks[i];
    const std::string where = "planner: chunk " + std::to_string(i);
    if (c.n_tokens == 0) detail::invalid(where + " has n_tokens 0");
    if (c.levels.empty()) detail::invalid(where + " has no levels");
    if (c.levels.size() != first.size()) {
      detail::invalid(where + " has " + std::to_string(c.levels.size()) + " levels, chunk 0 has " +
                      std::to_string(first.size()));
    }
    for (size_t l = 0; l < c.levels.size(); ++l) {
      const LevelOption& o = c.levels[l];
      if (o.name != first[l].name) {
        detail::invalid(where + " level " + std::to_string(l) + " is '" + o.name +
                        "', chunk 0 has '" + first[l].name + "'");
      }
      if (!std::isfinite(o.kl) || o.kl < 0) {
        detail::invalid(where + " level '" + o.name + "' has kl " + std::to_string(o.kl) +
                        " (must be finite and >= 0)");
      }
    }
  }
}

void validate_cost_model(const CostModel& cost) {
  if (!(cost.prefill_tokens_per_s > 0)) {
    detail::invalid("planner: prefill_tokens_per_s must be > 0, got " +
                    std::to_string(cost.prefill_tokens_per_s));
  }
  if (!(cost.decode_bytes_per_s > 0)) {
    detail::invalid("planner: decode_bytes_per_s must be > 0, got " +
                    std::to_string(cost.decode_bytes_per_s));
  }
  if (!(cost.token_bytes >= 0)) {
    detail::invalid("planner: token_bytes must be >= 0, got " + std::to_string(cost.token_bytes));
  }
}

double load_seconds(const ChunkOptions& chunk, size_t level, double throughput_bytes_per_s,
                    const CostModel& cost) {
  const double bytes = static_cast<double>(chunk.levels[level].bytes);
  return bytes / throughput_bytes_per_s + bytes / cost.decode_bytes_per_s;
}

double recompute_seconds(std::span<const ChunkOptions> chunks, size_t from,
                         double throughput_bytes_per_s, const CostModel& cost) {
  double tokens = 0;
  for (size_t j = from; j < chunks.size(); ++j) tokens += chunks[j].n_tokens;
  if (tokens == 0) return 0;
  return tokens * cost.token_bytes / throughput_bytes_per_s + tokens / cost.prefill_tokens_per_s;
}

}  // namespace cachegen
