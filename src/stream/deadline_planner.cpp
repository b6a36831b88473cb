// DeadlinePlannerPolicy: plan every remaining chunk (levels + an optional recompute suffix) under
// the deadline, greedily by KL reduction per second, and follow the plan's first decision.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cachegen/planner.h"
#include "core/checks.h"

namespace cachegen {
namespace {

// One upgrade of one chunk along its lower convex hull of (seconds, token-weighted KL).
struct Step {
  size_t chunk;
  size_t to_level;
  double extra_s;
  double gain;  // token-weighted KL removed
  double ratio() const {
    return extra_s > 0 ? gain / extra_s : std::numeric_limits<double>::infinity();
  }
};

struct Plan {
  double loss = 0;     // sum over chunks of n_tokens * kl
  double seconds = 0;  // predicted, margin included
  Decision first;      // the decision for the current chunk
};

}  // namespace

DeadlinePlannerPolicy::DeadlinePlannerPolicy(double transfer_margin) : margin_(transfer_margin) {
  if (!(transfer_margin >= 0) || !std::isfinite(transfer_margin)) {
    detail::invalid("DeadlinePlannerPolicy: transfer_margin must be >= 0 and finite, got " +
                    std::to_string(transfer_margin));
  }
}

Decision DeadlinePlannerPolicy::decide(size_t chunk_index, const LoadState& state) const {
  const auto chunks = state.chunks;
  const size_t n = chunks.size();
  if (chunk_index >= n) {
    detail::invalid("planner: chunk index " + std::to_string(chunk_index) + " out of range (" +
                    std::to_string(n) + " chunks)");
  }
  const size_t first = chunk_index;
  // Network time is uncertain (the estimate may be high), compute time is not: only the
  // transfer part of each prediction is inflated by the margin.
  const CostModel& cost = state.cost;
  const double throughput = state.throughput_bytes_per_s / (1 + margin_);
  const double budget_s = state.deadline_s - state.elapsed_s;

  // Per chunk: the fastest level, and the hull steps up from it.
  std::vector<size_t> fastest(n);
  std::vector<double> fastest_s(n), fastest_loss(n);
  std::vector<Step> steps;
  for (size_t j = first; j < n; ++j) {
    const ChunkOptions& c = chunks[j];
    auto seconds = [&](size_t l) { return load_seconds(c, l, throughput, cost); };
    auto loss = [&](size_t l) { return c.levels[l].kl * c.n_tokens; };
    size_t cur = 0;
    for (size_t l = 1; l < c.levels.size(); ++l) {
      if (seconds(l) < seconds(cur) || (seconds(l) == seconds(cur) && loss(l) < loss(cur))) cur = l;
    }
    fastest[j] = cur;
    fastest_s[j] = seconds(cur);
    fastest_loss[j] = loss(cur);
    for (;;) {  // next hull point: the steepest KL drop per extra second
      size_t next = cur;
      double best_ratio = -1;
      for (size_t l = 0; l < c.levels.size(); ++l) {
        if (loss(l) >= loss(cur)) continue;
        const Step s{j, l, seconds(l) - seconds(cur), loss(cur) - loss(l)};
        if (s.ratio() > best_ratio) {
          best_ratio = s.ratio();
          next = l;
        }
      }
      if (next == cur) break;
      steps.push_back({j, next, seconds(next) - seconds(cur), loss(cur) - loss(next)});
      cur = next;
    }
  }
  // Within a chunk the hull's ratios do not increase, so a stable sort keeps each chunk's steps
  // in order.
  std::stable_sort(steps.begin(), steps.end(),
                   [](const Step& a, const Step& b) { return a.ratio() > b.ratio(); });

  Plan best, fastest_plan;
  bool have_best = false, have_fastest = false;
  std::vector<size_t> level(n);
  std::vector<char> blocked(n);
  double loaded_fast_s = 0;  // fastest-level seconds of chunks [first, r)
  for (size_t r = first; r <= n; ++r) {
    if (r > first) loaded_fast_s += fastest_s[r - 1];
    const double base_s = loaded_fast_s + recompute_seconds(chunks, r, throughput, cost);
    Plan plan;
    plan.first = r == first ? Decision::recompute_rest() : Decision::load(fastest[first]);
    plan.seconds = base_s;
    if (!have_fastest || base_s < fastest_plan.seconds) {
      fastest_plan = plan;
      have_fastest = true;
    }
    if (!(base_s <= budget_s)) continue;
    double left_s = budget_s - base_s;
    for (size_t j = first; j < r; ++j) level[j] = fastest[j];
    std::fill(blocked.begin(), blocked.end(), 0);
    for (const Step& s : steps) {
      if (s.chunk >= r || blocked[s.chunk]) continue;
      if (s.extra_s <= left_s) {
        left_s -= s.extra_s;
        plan.seconds += s.extra_s;
        level[s.chunk] = s.to_level;
      } else {
        blocked[s.chunk] = 1;  // its later steps build on this one
      }
    }
    // The loss from the chosen levels themselves (not from running sums), so that equal plans
    // compare equal and lossless plans are exactly 0.
    for (size_t j = first; j < r; ++j)
      plan.loss += chunks[j].levels[level[j]].kl * chunks[j].n_tokens;
    if (r > first) plan.first = Decision::load(level[first]);
    if (!have_best || plan.loss < best.loss ||
        (plan.loss == best.loss && plan.seconds < best.seconds)) {
      best = plan;
      have_best = true;
    }
  }
  return have_best ? best.first : fastest_plan.first;
}

}  // namespace cachegen
