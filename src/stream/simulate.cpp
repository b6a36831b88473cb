// The policy simulator: a clock, a bandwidth trace and a throughput estimator around a policy.
#include <cmath>
#include <string>

#include "cachegen/planner_sim.h"
#include "core/checks.h"

namespace cachegen {

SimResult simulate(const PlannerPolicy& policy, std::span<const ChunkOptions> chunks,
                   const BandwidthTrace& trace, const SimSettings& settings) {
  validate_chunks(chunks);
  validate_trace(trace);
  validate_cost_model(settings.cost);
  if (std::isnan(settings.deadline_s)) detail::invalid("simulate: deadline_s is NaN");
  ThroughputEstimator estimator(settings.initial_throughput_bytes_per_s, settings.estimator_window,
                                settings.estimator_spread_window, settings.estimator_prior_cv);
  const size_t n = chunks.size();
  SimResult result;
  result.levels.assign(n, -1);
  result.recompute_from = n;
  double clock = 0, loss = 0, tokens = 0, bytes = 0;
  for (const ChunkOptions& c : chunks) tokens += c.n_tokens;
  for (size_t i = 0; i < n; ++i) {
    const LoadState state{clock,
                          settings.deadline_s,
                          estimator.estimate(),
                          chunks,
                          settings.cost,
                          estimator.variation(),
                          estimator.mean_seconds_per_byte()};
    const Decision d = policy.decide(i, state);
    if (d.recompute) {
      double suffix_tokens = 0;
      for (size_t j = i; j < n; ++j) suffix_tokens += chunks[j].n_tokens;
      const double id_bytes = suffix_tokens * settings.cost.token_bytes;
      clock += trace.transfer_seconds(i, clock, id_bytes) +
               suffix_tokens / settings.cost.prefill_tokens_per_s;
      bytes += id_bytes;
      result.recompute_from = i;
      break;
    }
    if (d.level >= chunks[i].levels.size()) {
      detail::invalid("simulate: policy " + policy.name() + " chose level " +
                      std::to_string(d.level) + " for chunk " + std::to_string(i) + ", which has " +
                      std::to_string(chunks[i].levels.size()) + " levels");
    }
    const LevelOption& level = chunks[i].levels[d.level];
    const double transfer_s = trace.transfer_seconds(i, clock, static_cast<double>(level.bytes));
    clock += transfer_s + static_cast<double>(level.bytes) / settings.cost.decode_bytes_per_s;
    estimator.observe(level.bytes, transfer_s);
    bytes += static_cast<double>(level.bytes);
    loss += level.kl * chunks[i].n_tokens;
    result.levels[i] = static_cast<int>(d.level);
  }
  result.load_s = clock;
  result.met_deadline = clock <= settings.deadline_s;
  result.mean_kl = loss / tokens;
  result.bytes = static_cast<uint64_t>(std::llround(bytes));
  if (settings.elements_per_token > 0) {
    result.bits_per_element = bytes * 8 / (tokens * settings.elements_per_token);
  }
  return result;
}

SimSummary summarize(std::span<const SimResult> results) {
  SimSummary s;
  s.n_loads = results.size();
  if (results.empty()) return s;
  for (const SimResult& r : results) {
    s.deadline_met_fraction += r.met_deadline ? 1 : 0;
    s.mean_load_s += r.load_s;
    s.mean_bits_per_element += r.bits_per_element;
    s.mean_kl += r.mean_kl;
  }
  const double n = static_cast<double>(results.size());
  s.deadline_met_fraction /= n;
  s.mean_load_s /= n;
  s.mean_bits_per_element /= n;
  s.mean_kl /= n;
  return s;
}

}  // namespace cachegen
