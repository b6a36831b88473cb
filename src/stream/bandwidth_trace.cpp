// Bandwidth traces (per chunk or over time), the scripted generators, and chunk ladders built
// from measured quality levels.
#include <cmath>
#include <string>

#include "cachegen/planner_sim.h"
#include "core/checks.h"

namespace cachegen {
namespace {

// splitmix64: a fixed, portable generator (std:: distributions differ between libraries).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

double BandwidthTrace::transfer_seconds(size_t chunk_index, double start_s, double bytes) const {
  if (segment_s <= 0) {
    return bytes / bytes_per_s[std::min(chunk_index, bytes_per_s.size() - 1)];
  }
  const size_t last = bytes_per_s.size() - 1;
  double t = std::max(start_s, 0.0);
  double left = bytes;
  double seconds = 0;
  for (;;) {
    const size_t k = static_cast<size_t>(std::floor(t / segment_s));
    if (k >= last) return seconds + left / bytes_per_s[last];
    const double segment_end = static_cast<double>(k + 1) * segment_s;
    const double fits = (segment_end - t) * bytes_per_s[k];
    if (left <= fits) return seconds + left / bytes_per_s[k];
    left -= fits;
    seconds += segment_end - t;
    t = segment_end;
  }
}

void validate_trace(const BandwidthTrace& trace) {
  if (trace.bytes_per_s.empty()) detail::invalid("trace '" + trace.name + "' is empty");
  for (size_t i = 0; i < trace.bytes_per_s.size(); ++i) {
    const double v = trace.bytes_per_s[i];
    if (!(v > 0) || !std::isfinite(v)) {
      detail::invalid("trace '" + trace.name + "' value " + std::to_string(i) + " is " +
                      std::to_string(v) + " bytes/s (must be > 0 and finite)");
    }
  }
  if (!(trace.segment_s >= 0) || !std::isfinite(trace.segment_s)) {
    detail::invalid("trace '" + trace.name + "': segment_s must be >= 0 and finite");
  }
}

BandwidthTrace constant_trace(double bytes_per_s, size_t n_chunks) {
  return {"constant", std::vector<double>(std::max<size_t>(n_chunks, 1), bytes_per_s), 0};
}

BandwidthTrace uniform_random_trace(double lo_bytes_per_s, double hi_bytes_per_s, size_t n_chunks,
                                    uint64_t seed) {
  BandwidthTrace trace{"uniform-random:" + std::to_string(seed), {}, 0};
  uint64_t state = seed;
  for (size_t i = 0; i < std::max<size_t>(n_chunks, 1); ++i) {
    const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
    trace.bytes_per_s.push_back(lo_bytes_per_s + u * (hi_bytes_per_s - lo_bytes_per_s));
  }
  return trace;
}

BandwidthTrace paper_uniform_trace(double elements_per_token, size_t n_chunks, uint64_t seed) {
  if (!(elements_per_token > 0) || !std::isfinite(elements_per_token)) {
    detail::invalid("paper_uniform_trace: elements_per_token must be > 0 and finite");
  }
  const double gbps = 1e9 / 8 * elements_per_token / kPaperElementsPerToken;  // bytes/s
  BandwidthTrace trace = uniform_random_trace(0.1 * gbps, 10 * gbps, n_chunks, seed);
  trace.name = "paper-uniform:" + std::to_string(seed);
  return trace;
}

BandwidthTrace step_trace(double before_bytes_per_s, double after_bytes_per_s, size_t drop_at,
                          size_t n_chunks) {
  BandwidthTrace trace{"step@" + std::to_string(drop_at), {}, 0};
  for (size_t i = 0; i < std::max<size_t>(n_chunks, 1); ++i) {
    trace.bytes_per_s.push_back(i < drop_at ? before_bytes_per_s : after_bytes_per_s);
  }
  return trace;
}

std::vector<LevelSpec> measured_quality_levels() {
  return {{"lossless", 13.1, 0},
          {"high", 4.491, 9.1e-5},
          {"medium", 1.453, 0.039},
          {"low", 1.229, 0.094}};
}

std::vector<ChunkOptions> uniform_chunks(size_t n_chunks, uint32_t tokens_per_chunk,
                                         double elements_per_token,
                                         std::span<const LevelSpec> levels) {
  if (!(elements_per_token > 0) || !std::isfinite(elements_per_token)) {
    detail::invalid("uniform_chunks: elements_per_token must be > 0 and finite");
  }
  std::vector<ChunkOptions> chunks(n_chunks);
  for (ChunkOptions& c : chunks) {
    c.n_tokens = tokens_per_chunk;
    for (const LevelSpec& l : levels) {
      const double bits = tokens_per_chunk * elements_per_token * l.bits_per_element;
      c.levels.push_back({l.name, static_cast<uint64_t>(std::ceil(bits / 8)), l.kl});
    }
  }
  return chunks;
}

}  // namespace cachegen
