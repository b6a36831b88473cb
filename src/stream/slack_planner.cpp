// SlackPlannerPolicy: a dynamic program over the slack to the recompute fallback, with a
// lognormal model of per-chunk seconds per byte (see cachegen/planner.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cachegen/planner.h"
#include "core/checks.h"

namespace cachegen {
namespace {

// Bins of the seconds-per-byte distribution, by cumulative probability: finer in the slow tail,
// where misses come from.
constexpr std::array<double, 16> kBinEdges = {0,   0.1, 0.2,  0.3,  0.4,  0.5,   0.6,   0.7,
                                              0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1};
constexpr size_t kBins = kBinEdges.size() - 1;
constexpr size_t kGrid = 128;  // slack grid points per value function

double normal_cdf(double z) {
  return 0.5 * std::erfc(-z / std::sqrt(2.0));
}

// The bin edges as standard normal quantiles (+-inf at the ends).
const std::array<double, kBinEdges.size()>& edge_quantiles() {
  static const auto q = [] {
    std::array<double, kBinEdges.size()> out{};
    out.front() = -std::numeric_limits<double>::infinity();
    out.back() = std::numeric_limits<double>::infinity();
    for (size_t e = 1; e + 1 < kBinEdges.size(); ++e) {
      double lo = -10, hi = 10;
      for (int it = 0; it < 200; ++it) {
        const double mid = 0.5 * (lo + hi);
        (normal_cdf(mid) < kBinEdges[e] ? lo : hi) = mid;
      }
      out[e] = 0.5 * (lo + hi);
    }
    return out;
  }();
  return q;
}

struct Bin {
  double x;  // multiple of the mean seconds per byte (the bin's conditional mean)
  double w;  // probability
};

// A lognormal with mean 1 and coefficient of variation cv, as kBins bins whose values are the
// conditional means (so the mean is kept exactly). cv 0: one point.
std::vector<Bin> seconds_per_byte_bins(double cv) {
  if (!(cv > 0)) return {{1.0, 1.0}};
  const double sigma = std::sqrt(std::log1p(cv * cv));
  const auto& z = edge_quantiles();
  std::vector<Bin> bins;
  for (size_t b = 0; b < kBins; ++b) {
    const double w = kBinEdges[b + 1] - kBinEdges[b];
    // E[X; z in (a, b)] = exp(mu + sigma^2/2) (Phi(b - sigma) - Phi(a - sigma)), mean 1.
    const double mass = normal_cdf(z[b + 1] - sigma) - normal_cdf(z[b] - sigma);
    bins.push_back({mass / w, w});
  }
  return bins;
}

}  // namespace

SlackPlannerPolicy::SlackPlannerPolicy(double miss_cost, double transfer_margin)
    : miss_cost_(miss_cost), margin_(transfer_margin) {
  if (!(miss_cost > 0) || !std::isfinite(miss_cost) || !(transfer_margin >= 0) ||
      !std::isfinite(transfer_margin)) {
    detail::invalid(
        "SlackPlannerPolicy: miss_cost must be > 0 and transfer_margin >= 0 (finite), "
        "got " +
        std::to_string(miss_cost) + " and " + std::to_string(transfer_margin));
  }
}

Decision SlackPlannerPolicy::decide(size_t chunk_index, const LoadState& state) const {
  const auto chunks = state.chunks;
  const size_t n = chunks.size();
  if (chunk_index >= n) {
    detail::invalid("planner: chunk index " + std::to_string(chunk_index) + " out of range (" +
                    std::to_string(n) + " chunks)");
  }
  const size_t first = chunk_index;
  const CostModel& cost = state.cost;
  const double throughput = state.throughput_bytes_per_s;
  // Expected seconds per byte: the mean over the estimator's longer history (per-chunk rates are
  // independent on the paper's traces: a short window is mostly noise), else the recent rate.
  const double spb =
      (1 + margin_) * (state.seconds_per_byte > 0 ? state.seconds_per_byte : 1 / throughput);
  const std::vector<Bin> bins = seconds_per_byte_bins(state.throughput_cv);
  double tokens = 0;
  for (const ChunkOptions& c : chunks) tokens += c.n_tokens;
  const size_t n_levels = chunks[first].levels.size();

  // Recompute seconds per chunk (the suffix time is linear in tokens) and the current slack.
  std::vector<double> rc(n);
  double span = 0;  // the most slack the remaining chunks can recover
  for (size_t j = first; j < n; ++j) {
    rc[j] = recompute_seconds(chunks, j, throughput, cost) -
            recompute_seconds(chunks, j + 1, throughput, cost);
    span += rc[j];
  }
  const double slack =
      state.deadline_s - state.elapsed_s - recompute_seconds(chunks, first, throughput, cost);
  auto expected_load_s = [&](size_t j, size_t l) {
    const double b = static_cast<double>(chunks[j].levels[l].bytes);
    return b * spb + b / cost.decode_bytes_per_s;
  };

  // Value functions on the grid S_g = -span + g * step, g < kGrid (all < 0); V(S >= 0) = 0.
  const double step = span / kGrid;
  std::vector<double> next(kGrid, miss_cost_), cur(kGrid);
  auto value = [&](const std::vector<double>& v, double s) {
    if (s >= 0) return 0.0;
    const double u = (s + span) / step;
    if (!(u >= 0)) return miss_cost_;
    const auto g = static_cast<size_t>(u);
    if (g >= kGrid) return 0.0;  // rounding at the top
    const double f = u - static_cast<double>(g);
    const double hi = g + 1 < kGrid ? v[g + 1] : 0.0;
    return v[g] + f * (hi - v[g]);
  };
  // Q(k, l, S): chunk k at level l from slack S, then optimal play with V_{k+1} = v.
  auto q_value = [&](const std::vector<double>& v, size_t k, size_t l, double s) {
    const LevelOption& o = chunks[k].levels[l];
    const double b = static_cast<double>(o.bytes);
    const double base = s + rc[k] - b / cost.decode_bytes_per_s;
    double e = 0;
    for (const Bin& bin : bins) e += bin.w * value(v, base - b * spb * bin.x);
    return o.kl * chunks[k].n_tokens / tokens + e;
  };
  if (std::isfinite(slack) && step > 0) {
    for (size_t k = n - 1; k > first; --k) {
      for (size_t g = 0; g < kGrid; ++g) {
        const double s = -span + static_cast<double>(g) * step;
        double best = miss_cost_;
        for (size_t l = 0; l < n_levels; ++l) best = std::min(best, q_value(next, k, l, s));
        cur[g] = best;
      }
      std::swap(cur, next);
    }
  }

  // The fastest way to finish, for when nothing is predicted to meet the deadline.
  size_t fastest = 0;
  double fastest_rest_s = 0;
  for (size_t l = 0; l < n_levels; ++l) {
    double s = 0;
    for (size_t j = first; j < n; ++j) s += expected_load_s(j, l);
    if (l == 0 || s < fastest_rest_s) {
      fastest = l;
      fastest_rest_s = s;
    }
  }

  if (slack >= 0) {
    // The fallback meets the deadline. Loading a zero-loss level instead is as good when it is
    // faster and cannot miss (e.g. without a deadline).
    size_t exact = 0;
    for (size_t l = 1; l < n_levels; ++l) {
      if (chunks[first].levels[l].kl < chunks[first].levels[exact].kl) exact = l;
    }
    double exact_rest_s = 0;
    for (size_t j = first; j < n; ++j) exact_rest_s += expected_load_s(j, exact);
    if (chunks[first].levels[exact].kl == 0 &&
        exact_rest_s < recompute_seconds(chunks, first, throughput, cost) &&
        q_value(next, first, exact, slack) <= 0) {
      return Decision::load(exact);
    }
    return Decision::recompute_rest();
  }
  size_t pick = n_levels;
  double pick_q = miss_cost_;
  for (size_t l = 0; l < n_levels; ++l) {
    const double q = q_value(next, first, l, slack);
    if (q < pick_q || (pick < n_levels && q == pick_q &&
                       expected_load_s(first, l) < expected_load_s(first, pick))) {
      pick = l;
      pick_q = q;
    }
  }
  if (pick < n_levels && pick_q < miss_cost_ * (1 - 1e-9)) return Decision::load(pick);
  return recompute_seconds(chunks, first, throughput, cost) <= fastest_rest_s
             ? Decision::recompute_rest()
             : Decision::load(fastest);
}

}  // namespace cachegen
