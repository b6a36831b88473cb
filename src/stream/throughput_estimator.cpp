// Throughput estimate: byte-weighted harmonic mean over a window of recent chunks, and the
// spread of per-chunk seconds per byte over a longer one.
#include <cmath>
#include <string>

#include "cachegen/planner.h"
#include "core/checks.h"

namespace cachegen {

ThroughputEstimator::ThroughputEstimator(double initial_bytes_per_s, size_t window,
                                         size_t spread_window, double prior_cv)
    : initial_(initial_bytes_per_s),
      window_(window),
      spread_window_(spread_window),
      prior_cv_(prior_cv) {
  if (!(initial_bytes_per_s > 0) || !std::isfinite(initial_bytes_per_s)) {
    detail::invalid("ThroughputEstimator: initial_bytes_per_s must be > 0 and finite, got " +
                    std::to_string(initial_bytes_per_s));
  }
  if (window == 0) detail::invalid("ThroughputEstimator: window must be >= 1");
  if (spread_window < 2) detail::invalid("ThroughputEstimator: spread_window must be >= 2");
  if (!(prior_cv >= 0) || !std::isfinite(prior_cv)) {
    detail::invalid("ThroughputEstimator: prior_cv must be >= 0 and finite, got " +
                    std::to_string(prior_cv));
  }
}

void ThroughputEstimator::observe(uint64_t bytes, double seconds) {
  if (bytes == 0 || !(seconds > 0) || !std::isfinite(seconds)) return;
  const std::pair<double, double> sample{static_cast<double>(bytes), seconds};
  if (recent_.size() < window_) {
    recent_.push_back(sample);
  } else {
    recent_[n_observed_ % window_] = sample;
  }
  if (spread_.size() < spread_window_) {
    spread_.push_back(seconds / sample.first);
  } else {
    spread_[n_observed_ % spread_window_] = seconds / sample.first;
  }
  ++n_observed_;
}

double ThroughputEstimator::estimate() const {
  if (recent_.empty()) return initial_;
  double bytes = 0, seconds = 0;
  for (const auto& [b, s] : recent_) {
    bytes += b;
    seconds += s;
  }
  // The window starts full of the initial estimate: each empty slot counts as a chunk of the
  // mean observed size at the initial rate, so one unlucky first chunk does not become the
  // whole estimate.
  const double empty = static_cast<double>(window_ - recent_.size());
  const double mean_bytes = bytes / static_cast<double>(recent_.size());
  return (bytes + empty * mean_bytes) / (seconds + empty * mean_bytes / initial_);
}

double ThroughputEstimator::mean_seconds_per_byte() const {
  // kPriorWeight pseudo-samples at the initial rate: per-chunk rates are heavy-tailed, and a few
  // fast chunks say little about the mean (tuned on the paper's traces, seeds 0-99: 3 vs 1).
  constexpr double kPriorWeight = 3;
  double sum = kPriorWeight / initial_;
  for (double v : spread_) sum += v;
  return sum / (static_cast<double>(spread_.size()) + kPriorWeight);
}

double ThroughputEstimator::variation() const {
  // The sample variance shrunk towards the prior by kPriorWeight pseudo-samples: a few fast
  // chunks in a row say little about how slow the next one can be.
  constexpr double kPriorWeight = 2;
  if (spread_.size() < 2) return prior_cv_;
  double mean = 0;
  for (double v : spread_) mean += v;
  mean /= static_cast<double>(spread_.size());
  double sq = 0;
  for (double v : spread_) sq += (v - mean) * (v - mean);
  const double dof = static_cast<double>(spread_.size() - 1);
  const double cv2 = sq / (mean * mean);  // dof * sample cv^2
  return std::sqrt((kPriorWeight * prior_cv_ * prior_cv_ + cv2) / (kPriorWeight + dof));
}

}  // namespace cachegen
