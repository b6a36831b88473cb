// The baseline policies: one fixed level, and CacheGen's Algorithm 1.
#include <memory>
#include <string>

#include "cachegen/planner.h"
#include "core/checks.h"

namespace cachegen {
namespace {

void check_chunk_index(size_t chunk_index, const LoadState& state) {
  if (chunk_index >= state.chunks.size()) {
    detail::invalid("planner: chunk index " + std::to_string(chunk_index) + " out of range (" +
                    std::to_string(state.chunks.size()) + " chunks)");
  }
}

}  // namespace

FixedLevelPolicy::FixedLevelPolicy(std::string level_name) : level_(std::move(level_name)) {
  if (level_.empty()) detail::invalid("FixedLevelPolicy: empty level name");
}

Decision FixedLevelPolicy::decide(size_t chunk_index, const LoadState& state) const {
  check_chunk_index(chunk_index, state);
  const auto& levels = state.chunks[chunk_index].levels;
  for (size_t l = 0; l < levels.size(); ++l) {
    if (levels[l].name == level_) return Decision::load(l);
  }
  detail::invalid("FixedLevelPolicy: chunk " + std::to_string(chunk_index) + " has no level '" +
                  level_ + "'");
}

Decision CacheGenAlgorithm1Policy::decide(size_t chunk_index, const LoadState& state) const {
  check_chunk_index(chunk_index, state);
  const auto chunks = state.chunks;
  const double remaining_s = state.deadline_s - state.elapsed_s;
  const double throughput = state.throughput_bytes_per_s;

  const double recompute_s = recompute_seconds(chunks, chunk_index, throughput, state.cost);
  if (recompute_s <= remaining_s) return Decision::recompute_rest();

  // Each level applied to every remaining chunk: its time and its token-weighted KL.
  size_t best = 0, fastest = 0;
  bool any_fits = false;
  double best_kl = 0, best_s = 0, fastest_s = 0;
  for (size_t l = 0; l < chunks[chunk_index].levels.size(); ++l) {
    double seconds = 0, kl = 0;
    for (size_t j = chunk_index; j < chunks.size(); ++j) {
      seconds += load_seconds(chunks[j], l, throughput, state.cost);
      kl += chunks[j].levels[l].kl * chunks[j].n_tokens;
    }
    if (l == 0 || seconds < fastest_s) {
      fastest = l;
      fastest_s = seconds;
    }
    if (seconds <= remaining_s &&
        (!any_fits || kl < best_kl || (kl == best_kl && seconds < best_s))) {
      any_fits = true;
      best = l;
      best_kl = kl;
      best_s = seconds;
    }
  }
  if (any_fits) return Decision::load(best);
  // Nothing fits: the fastest option, so that the deadline is missed by as little as possible.
  return recompute_s < fastest_s ? Decision::recompute_rest() : Decision::load(fastest);
}

std::unique_ptr<PlannerPolicy> make_planner_policy(const std::string& name) {
  const std::string fixed = "fixed:";
  if (name.starts_with(fixed)) return std::make_unique<FixedLevelPolicy>(name.substr(fixed.size()));
  if (name == "cachegen-alg1") return std::make_unique<CacheGenAlgorithm1Policy>();
  if (name == "deadline-planner") return std::make_unique<SlackPlannerPolicy>();
  if (name == "deadline-planner-greedy") return std::make_unique<DeadlinePlannerPolicy>();
  detail::invalid("planner: unknown policy '" + name +
                  "' (fixed:<level>, cachegen-alg1, deadline-planner, deadline-planner-greedy)");
}

}  // namespace cachegen
