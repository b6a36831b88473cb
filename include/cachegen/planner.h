// cachegen: the stream planner — which quality level to load each chunk of a context at, or
// whether to recompute (prefill) the rest, so that the context is ready within a deadline at the
// best quality (CacheGen, SIGCOMM 2024, §5.3 and Algorithm 1).
//
// Units everywhere: seconds (s), bytes, bytes per second (bytes/s), tokens per second.
// Quality is a *loss*: the measured KL divergence of a level (docs/QUALITY_LEVELS.md), 0 for
// lossless and for recomputed chunks; lower is better. The quality of a whole context is the
// token-weighted mean of its chunks' KL.
//
// How a loader uses it (src/stream has no dependency on llama.cpp or on the codec):
//   ThroughputEstimator est;                       // initial estimate until data arrives
//   for (size_t i = 0; i < chunks.size(); ++i) {
//     Decision d = policy.decide(i, LoadState{elapsed_s, deadline_s, est.estimate(), chunks,
//                                             cost, est.variation()});
//     if (d.recompute) { send the tokens of chunks i..end, prefill them; break; }
//     fetch chunk i at level d.level (timing the transfer); est.observe(bytes, seconds);
//   }
// Recompute is a *suffix* decision: once a policy answers recompute at chunk i, chunks i..end
// are all prefilled from their tokens, in order, after the loaded KV; decide() is not called
// again for that load.
//
// Thread safety: the policies here are stateless; decide() is const and may be called
// concurrently on one policy. A ThroughputEstimator is not synchronised: one per load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace cachegen {

// One way to load a chunk: a quality level's coded size and measured quality loss.
struct LevelOption {
  std::string name;    // e.g. "lossless", "high", "medium", "low"
  uint64_t bytes = 0;  // bytes to transfer for this chunk at this level
  double kl = 0;       // measured KL divergence (nats) of this level; 0 = lossless
};

// One chunk of a context: `n_tokens` consecutive tokens and the levels it is stored at.
// Every chunk of a context lists the same level names in the same order (a level index means
// the same level in every chunk); sizes and KL may differ per chunk.
struct ChunkOptions {
  uint32_t n_tokens = 0;
  std::vector<LevelOption> levels;
};

// Throws Error(invalid_argument) naming the chunk and field when `chunks` is empty, a chunk has
// no tokens or no levels, a KL is negative or not finite, or the level names differ between
// chunks.
void validate_chunks(std::span<const ChunkOptions> chunks);

// The costs that do not depend on the network. All rates must be > 0; infinity means free.
struct CostModel {
  // Prefill speed of the serving engine for recomputed chunks (linear in tokens: the extra
  // attention cost of later tokens is not modelled).
  double prefill_tokens_per_s = 5000;
  // Decode speed of a loaded chunk, added to its transfer time (no overlap is assumed, which
  // is conservative); infinity = decoding is free.
  double decode_bytes_per_s = std::numeric_limits<double>::infinity();
  // Bytes sent per token when recomputing (the token ids).
  double token_bytes = 4;
};

// Throws Error(invalid_argument) when a rate is not > 0 or token_bytes is negative or NaN.
void validate_cost_model(const CostModel& cost);

// Predicted seconds to load chunk `chunk`'s level `level` at `throughput_bytes_per_s`
// (transfer + decode).
double load_seconds(const ChunkOptions& chunk, size_t level, double throughput_bytes_per_s,
                    const CostModel& cost);
// Predicted seconds to recompute chunks [from, end): send their tokens, then prefill them.
// 0 when from == chunks.size().
double recompute_seconds(std::span<const ChunkOptions> chunks, size_t from,
                         double throughput_bytes_per_s, const CostModel& cost);

// What the loader knows before fetching a chunk.
struct LoadState {
  double elapsed_s = 0;                                         // since the load began
  double deadline_s = std::numeric_limits<double>::infinity();  // since the load began; inf = none
  double throughput_bytes_per_s = 0;  // ThroughputEstimator::estimate(), > 0
  std::span<const ChunkOptions> chunks;
  CostModel cost;
  // How much one chunk's transfer time varies around the estimate: the coefficient of variation
  // of seconds per byte between chunks (ThroughputEstimator::variation()); 0 = take the
  // estimate as exact.
  double throughput_cv = 0;
  // The mean seconds per byte of a chunk over a longer history
  // (ThroughputEstimator::mean_seconds_per_byte()); 0 = unknown (1 / throughput_bytes_per_s).
  // Used by SlackPlannerPolicy, whose model of chunk times needs the mean, not a recent rate.
  double seconds_per_byte = 0;
};

// A policy's answer for one chunk.
struct Decision {
  bool recompute = false;  // true: prefill this chunk and every later one; `level` is unused
  size_t level = 0;        // index into ChunkOptions::levels when !recompute

  static Decision load(size_t level) { return {false, level}; }
  static Decision recompute_rest() { return {true, 0}; }
  bool operator==(const Decision&) const = default;
};

// Predicts throughput from the chunks fetched so far: total bytes / total seconds over the last
// `window` chunks, i.e. the byte-weighted harmonic mean of their throughputs (as CacheGen and
// throughput-based ABR do). Harmonic, not arithmetic, because a transfer's duration is
// bytes / throughput: the time-weighted mean predicts the time of the next chunks without
// bias when throughput varies, and one slow chunk pulls the estimate down at once (a drop is
// seen after one chunk) while one fast chunk barely raises it. A short window follows level
// shifts; a long one averages out per-chunk noise.
// It also measures how much chunks vary (variation()) over a longer `spread_window`, for
// policies that keep a reserve against a slow chunk.
class ThroughputEstimator {
 public:
  // Throws Error(invalid_argument) unless initial_bytes_per_s > 0 (finite), window >= 1,
  // spread_window >= 2 and prior_cv >= 0 (finite).
  explicit ThroughputEstimator(double initial_bytes_per_s = 125e6, size_t window = 8,
                               size_t spread_window = 16, double prior_cv = 1.0);

  // Records one fetched chunk: `bytes` moved in `seconds` (> 0; a sample with seconds <= 0 or
  // bytes == 0 is ignored, it carries no rate).
  void observe(uint64_t bytes, double seconds);
  // bytes/s: the window's harmonic mean, where the window starts full of the initial estimate
  // (each slot not yet observed counts as a chunk of the mean observed size at the initial rate).
  double estimate() const;
  // Coefficient of variation (standard deviation / mean) of the seconds per byte of the last
  // `spread_window` chunks: prior_cv until two chunks have been observed, then the sample
  // value shrunk towards prior_cv by two pseudo-samples.
  double variation() const;
  // The mean seconds per byte of the last `spread_window` chunks (unweighted, the mean of one
  // chunk's rate), with three pseudo-samples at the initial estimate: 1 / initial until data
  // arrives.
  double mean_seconds_per_byte() const;
  // Chunks the estimate is made from: min(observed, window).
  size_t samples() const { return recent_.size(); }
  size_t n_observed() const { return n_observed_; }

 private:
  double initial_;
  size_t window_;
  size_t spread_window_;
  double prior_cv_;
  std::vector<std::pair<double, double>> recent_;  // ring of (bytes, seconds)
  std::vector<double> spread_;                     // ring of seconds per byte
  size_t n_observed_ = 0;
};

// A pluggable loading policy. decide() is called before each chunk with i in increasing order
// (i < state.chunks.size(), state.chunks validated by the caller); it must return a level index
// valid for chunk i, or recompute. Policies throw Error(invalid_argument) only from their
// constructors and for a chunk index out of range.
class PlannerPolicy {
 public:
  virtual ~PlannerPolicy() = default;
  virtual Decision decide(size_t chunk_index, const LoadState& state) const = 0;
  virtual std::string name() const = 0;
};

// Always loads the level named `level_name` (the "every fixed level" baselines); never
// recomputes. decide() throws Error(invalid_argument) when a chunk has no such level.
class FixedLevelPolicy final : public PlannerPolicy {
 public:
  explicit FixedLevelPolicy(std::string level_name);
  Decision decide(size_t chunk_index, const LoadState& state) const override;
  std::string name() const override { return "fixed:" + level_; }

 private:
  std::string level_;
};

// CacheGen's Algorithm 1, as in the paper: at chunk i, with remaining time
// R = deadline - elapsed and the throughput estimate T,
//   1. if recompute_seconds(chunks, i, T) <= R: recompute the rest;
//   2. else the best level (lowest KL) L such that loading every remaining chunk at L fits:
//      sum_{j >= i} load_seconds(j, L, T) <= R;
//   3. if nothing fits: the fastest of those options (recompute, or a level for every remaining
//      chunk; a level on a tie), so the deadline is missed by as little as predicted.
// Levels are ranked by their token-weighted KL over the remaining chunks (ties: fewer seconds).
// No safety margin; the same level is assumed for all remaining chunks.
class CacheGenAlgorithm1Policy final : public PlannerPolicy {
 public:
  Decision decide(size_t chunk_index, const LoadState& state) const override;
  std::string name() const override { return "cachegen-alg1"; }
};

// The earlier planner ("deadline-planner-greedy"). At each chunk, plans every remaining chunk and
// returns the plan's decision for the current one (replanning at the next chunk with the new
// estimate, so it reacts to drops):
//   * for each recompute start r in [i, n] (r = n: no recompute), chunks i..r-1 start at their
//     fastest level, then are upgraded greedily by token-weighted KL reduction per extra second
//     (steps along each chunk's lower convex hull of (seconds, KL)) while the plan still fits:
//       elapsed + load + risk_z * sigma + recompute(r..n) <= deadline,
//     load = predicted loading seconds with transfers at throughput / (1 + transfer_margin),
//     sigma = (seconds per byte) * throughput_cv * sqrt(sum B_j^2) over the planned bytes B_j
//     (chunks' transfer times varying independently; the estimate's own error is left to the
//     margin and to replanning);
//   * the plan with the lowest total KL wins (ties: the earlier predicted finish); upgrades of
//     equal worth go to later chunks first, deferring commitment to a better estimate;
//   * guard on the committed chunk: its level is lowered until, even if it arrives at
//     throughput / (1 + risk_z * throughput_cv), the fastest way to finish the rest (with its
//     reserve) still fits; if no level passes, recompute when that fits.
// The reserve covers network uncertainty only: prefill (recompute) time is known, so a
// recompute suffix is a safe way to finish. When no plan fits with its reserve, the fallback is
// the plan of fastest levels plus a recompute suffix with the most slack per reserve (the one
// most likely to finish in time), or when none is predicted to finish in time, the fastest.
class DeadlinePlannerPolicy final : public PlannerPolicy {
 public:
  // Throws Error(invalid_argument) unless transfer_margin >= 0 and risk_z >= 0 (finite).
  explicit DeadlinePlannerPolicy(double transfer_margin = 0.1, double risk_z = 1.65);
  Decision decide(size_t chunk_index, const LoadState& state) const override;
  std::string name() const override { return "deadline-planner-greedy"; }

 private:
  double margin_;
  double risk_z_;
};

// Ours, the default "deadline-planner": a dynamic program over the *slack* to a recompute
// fallback. Recomputing (prefilling) a suffix takes a known time, so at chunk i the load can
// always finish by recomputing chunks i..end; the slack
//   S = deadline - elapsed - recompute_seconds(chunks, i)
// says whether that fallback meets the deadline now (S >= 0: recompute, KL 0, met). Loading
// chunk k at level L moves it by recompute time of chunk k minus the level's load time, which is
// random: bytes * (seconds per byte), seconds per byte drawn from a lognormal with the
// estimate's mean (times 1 + transfer_margin) and the estimator's coefficient of variation
// (throughput_cv; 0 = exact), in 15 bins that keep its mean and its heavy tail (to the 99.9th
// percentile and beyond). decide() solves, backwards over the remaining chunks on a grid of
// slack values,
//   V_k(S) = 0 for S >= 0;   V_n(S < 0) = miss_cost;
//   V_k(S < 0) = min(miss_cost, min_L kl_L * tokens_k / tokens + E V_{k+1}(S + rc_k - t_{k,L})),
// i.e. the lowest expected mean KL plus miss_cost times the probability of missing, and takes
// the best action for the current chunk. It spends slack where it is cheapest: early chunks at
// high quality while the fallback can still absorb a slow one, faster levels when the remaining
// chunks could no longer make up for it; replanning at each chunk with the new estimate reacts
// to drops. With S >= 0 it recomputes, unless loading a zero-KL level for the rest is faster and
// cannot miss (e.g. no deadline). When every action misses for certain (V = miss_cost; near the
// edge of the grid, interpolation may leave a tiny chance and the action is then the DP's), the
// fastest option (recompute, or the fastest level for every chunk), as Algorithm 1 does.
// Cost: O(chunks * 128 * levels * 15) per decide().
class SlackPlannerPolicy final : public PlannerPolicy {
 public:
  // miss_cost: the penalty of a missed deadline, in units of the context's mean KL (tuned on
  // the paper's traces, seeds 0-99, for ~96% met); transfer_margin: added to the expected seconds
  // per byte. Throws Error(invalid_argument) unless miss_cost > 0 and transfer_margin >= 0
  // (finite).
  explicit SlackPlannerPolicy(double miss_cost = 0.3, double transfer_margin = 0.0);
  Decision decide(size_t chunk_index, const LoadState& state) const override;
  std::string name() const override { return "deadline-planner"; }

 private:
  double miss_cost_;
  double margin_;
};

// A policy by name: "fixed:<level>", "cachegen-alg1", "deadline-planner" (SlackPlannerPolicy,
// defaults), "deadline-planner-greedy" (DeadlinePlannerPolicy, defaults).
// Throws Error(invalid_argument) for any other name.
std::unique_ptr<PlannerPolicy> make_planner_policy(const std::string& name);

}  // namespace cachegen
