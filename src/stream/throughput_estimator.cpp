// Throughput estimate: byte-weighted harmonic mean over a window of recent chunks.
#include <cmath>
#include <string>

#include "cachegen/planner.h"
#include "core/checks.h"

namespace cachegen {

ThroughputEstimator::ThroughputEstimator(double initial_bytes_per_s, size_t window)
    : initial_(initial_bytes_per_s), window_(window) {
  if (!(initial_bytes_per_s > 0) || !std::isfinite(initial_bytes_per_s)) {
    detail::invalid("ThroughputEstimator: initial_bytes_per_s must be > 0 and finite, got " +
                    std::to_string(initial_bytes_per_s));
  }
  if (window == 0) detail::invalid("ThroughputEstimator: window must be >= 1");
  recent_.reserve(window);
}

void ThroughputEstimator::observe(uint64_t bytes, double seconds) {
  if (bytes == 0 || !(seconds > 0) || !std::isfinite(seconds)) return;
  const std::pair<double, double> sample{static_cast<double>(bytes), seconds};
  if (recent_.size() < window_) {
    recent_.push_back(sample);
  } else {
    recent_[next_] = sample;
  }
  next_ = (next_ + 1) % window_;
  ++n_observed_;
}

double ThroughputEstimator::estimate() const {
  if (recent_.empty()) return initial_;
  double bytes = 0, seconds = 0;
  for (const auto& [b, s] : recent_) {
    bytes += b;
    seconds += s;
  }
  return bytes / seconds;
}

}  // namespace cachegen
