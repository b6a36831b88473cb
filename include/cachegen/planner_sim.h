// cachegen: a simulator for stream planner policies (cachegen/planner.h) on bandwidth traces,
// and the scripted traces the tests and `cachegen bench stream` use.
//
// Units: seconds, bytes, bytes/s, tokens/s. Everything is deterministic: a trace generator with
// the same seed gives the same trace on every platform (it does not use <random>'s
// distributions, whose output is implementation-defined).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "cachegen/planner.h"

namespace cachegen {

// Available bandwidth during a load, either one value per chunk (the paper's traces: chunk i is
// fetched at bytes_per_s[i]; the last value holds for later chunks) or piecewise constant over
// time (bytes_per_s[k] from k * segment_s to (k + 1) * segment_s; the last value holds after).
struct BandwidthTrace {
  std::string name;
  std::vector<double> bytes_per_s;  // each > 0 and finite
  double segment_s = 0;             // 0: one value per chunk; > 0: over time

  // Seconds to move `bytes` starting at time `start_s` as the `chunk_index`-th transfer.
  double transfer_seconds(size_t chunk_index, double start_s, double bytes) const;
};

// Throws Error(invalid_argument) when the trace is empty, a value is not > 0 and finite, or
// segment_s is negative or not finite.
void validate_trace(const BandwidthTrace& trace);

// Scripted traces.
BandwidthTrace constant_trace(double bytes_per_s, size_t n_chunks);
// Uniform random bandwidth per chunk in [lo, hi] bytes/s (the paper draws 0.1-10 Gbps per
// chunk; pass those bounds scaled to the model's bytes per token), from a 64-bit seed.
BandwidthTrace uniform_random_trace(double lo_bytes_per_s, double hi_bytes_per_s, size_t n_chunks,
                                    uint64_t seed);
// The paper's traces scaled to a model: uniform 0.1-10 Gbps per chunk for Mistral-7B
// (kPaperElementsPerToken KV elements per token), times elements_per_token /
// kPaperElementsPerToken, so that a chunk of a smaller model takes as long as the paper's.
inline constexpr double kPaperElementsPerToken = 32.0 * 2 * 8 * 128;
BandwidthTrace paper_uniform_trace(double elements_per_token, size_t n_chunks, uint64_t seed);
// `before` bytes/s for chunks [0, drop_at), then `after` for the rest (a sudden drop or rise).
BandwidthTrace step_trace(double before_bytes_per_s, double after_bytes_per_s, size_t drop_at,
                          size_t n_chunks);

// One level of a model's quality ladder, as measured by `cachegen eval`.
struct LevelSpec {
  std::string name;
  double bits_per_element = 0;
  double kl = 0;
};
// The levels of docs/QUALITY_LEVELS.md measured on stories260K (coded bits/element, KL):
// lossless 13.1 / 0, high 4.491 / 9.1e-5, medium 1.453 / 0.039, low 1.229 / 0.094.
std::vector<LevelSpec> measured_quality_levels();
// `n_chunks` chunks of `tokens_per_chunk` tokens, each level sized
// tokens * elements_per_token * bits_per_element / 8 bytes (rounded up).
std::vector<ChunkOptions> uniform_chunks(size_t n_chunks, uint32_t tokens_per_chunk,
                                         double elements_per_token,
                                         std::span<const LevelSpec> levels);

struct SimSettings {
  double deadline_s = std::numeric_limits<double>::infinity();
  CostModel cost;
  double initial_throughput_bytes_per_s = 125e6;  // the estimator's start
  size_t estimator_window = 8;
  size_t estimator_spread_window = 16;
  double estimator_prior_cv = 1.0;
  double elements_per_token = 0;  // for bits_per_element; 0 leaves it 0
};

struct SimResult {
  bool met_deadline = false;    // load_s <= deadline_s
  double load_s = 0;            // until the last chunk is loaded or prefilled
  double mean_kl = 0;           // token-weighted over the context
  uint64_t bytes = 0;           // every byte sent: loaded levels and recomputed tokens' ids
  double bits_per_element = 0;  // bytes * 8 / (tokens * elements_per_token), 0 if unknown
  size_t recompute_from = 0;    // first recomputed chunk; == number of chunks when none
  std::vector<int> levels;      // per chunk: level index, or -1 when recomputed
};

// Runs `policy` over `chunks` on `trace`: before chunk i it calls decide(i, state) with the
// simulated clock and the estimator's estimate; a loaded chunk takes
// trace.transfer_seconds(i, clock, bytes) plus its decode time and is observe()d (transfer time
// only); a recompute sends the remaining tokens' ids at the trace's bandwidth for chunk i, then
// prefills them. Throws Error(invalid_argument) for invalid chunks, trace or settings, or when
// the policy returns a level index out of range.
SimResult simulate(const PlannerPolicy& policy, std::span<const ChunkOptions> chunks,
                   const BandwidthTrace& trace, const SimSettings& settings);

// Aggregates over many simulated loads (one row of `cachegen bench stream`).
struct SimSummary {
  size_t n_loads = 0;
  double deadline_met_fraction = 0;
  double mean_load_s = 0;
  double mean_bits_per_element = 0;
  double mean_kl = 0;
};
SimSummary summarize(std::span<const SimResult> results);

}  // namespace cachegen
