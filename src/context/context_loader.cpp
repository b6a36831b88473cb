// Pipelined prefix loading (contract: cachegen/context_loader.h).
#include "cachegen/context_loader.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "cachegen/error.h"

namespace cachegen {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One fetched value (or the reason fetching stopped), handed from the fetch thread.
struct Fetched {
  size_t chunk = 0;
  std::string level;
  std::vector<uint8_t> value;
  std::string stop;  // non-empty: no value; loading ends here for this reason
  LoadStop kind = LoadStop::none;
};

}  // namespace

LevelChooser fixed_level_chooser(std::string level) {
  LevelChooser c;
  c.choose = [level](const StoredChunk& chunk, const LoadProgress&) -> std::optional<std::string> {
    if (chunk.find(level) == nullptr) return std::nullopt;
    return level;
  };
  return c;
}

LevelChooser planned_chooser(const PlannerPolicy& policy, std::span<const StoredChunk> chunks,
                             const std::vector<std::pair<std::string, double>>& level_kl,
                             const CostModel& cost, double deadline_s, double initial_bytes_per_s) {
  struct Shared {
    std::vector<ChunkOptions> options;
    ThroughputEstimator estimator;
    std::mutex mu;
    explicit Shared(double initial) : estimator(initial) {}
  };
  auto sh = std::make_shared<Shared>(initial_bytes_per_s);
  std::vector<std::pair<std::string, double>> common;
  for (const std::pair<std::string, double>& level : level_kl) {
    if (std::all_of(chunks.begin(), chunks.end(),
                    [&](const StoredChunk& c) { return c.find(level.first) != nullptr; })) {
      common.push_back(level);
    }
  }
  if (common.empty() && !chunks.empty()) {
    throw Error(ErrorCode::invalid_argument,
                "planned_chooser: no level is stored for every chunk of the prefix");
  }
  for (const StoredChunk& c : chunks) {
    ChunkOptions o;
    o.n_tokens = static_cast<uint32_t>(c.n_tokens);
    for (const auto& [name, kl] : common) o.levels.push_back({name, c.find(name)->bytes, kl});
    sh->options.push_back(std::move(o));
  }
  LevelChooser out;
  out.observe = [sh](uint64_t bytes, double seconds) {
    std::lock_guard lock(sh->mu);
    sh->estimator.observe(bytes, seconds);
  };
  out.choose = [sh, &policy, cost, deadline_s](
                   const StoredChunk& chunk, const LoadProgress& p) -> std::optional<std::string> {
    std::lock_guard lock(sh->mu);
    LoadState st;
    st.elapsed_s = p.elapsed_s;
    st.deadline_s = deadline_s;
    st.throughput_bytes_per_s = sh->estimator.estimate();
    st.throughput_cv = sh->estimator.variation();
    st.seconds_per_byte = sh->estimator.mean_seconds_per_byte();
    st.chunks = sh->options;
    st.cost = cost;
    const Decision d = policy.decide(chunk.index, st);
    if (d.recompute) return std::nullopt;
    return sh->options.at(chunk.index).levels.at(d.level).name;
  };
  return out;
}

LoadReport load_prefix(const ContextStore& store, std::span<const int32_t> tokens,
                       std::span<const StoredChunk> chunks, const LevelChooser& chooser,
                       ChunkSink& sink, const LoadOptions& options) {
  const size_t ct = store.chunk_tokens();
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].index != i || (i + 1) * ct > tokens.size()) {
      throw Error(ErrorCode::invalid_argument,
                  "load_prefix: chunks must be 0, 1, ... of the given tokens");
    }
  }
  if (!chooser.choose) throw Error(ErrorCode::invalid_argument, "load_prefix: no chooser");
  const size_t depth = std::max<size_t>(1, options.prefetch);
  const Clock::time_point t0 = Clock::now();
  LoadReport report;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Fetched> queue;
  bool stop_fetching = false;  // the decoder gave up: the fetcher ends
  LoadProgress progress;       // guarded by mu (the fetcher writes, the report reads)

  std::thread fetcher([&] {
    for (size_t i = 0; i < chunks.size(); ++i) {
      Fetched f;
      f.chunk = i;
      LoadProgress p;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return queue.size() < depth || stop_fetching; });
        if (stop_fetching) return;
        progress.next_chunk = i;
        progress.elapsed_s = seconds_since(t0);
        p = progress;
      }
      if (options.cancel != nullptr && options.cancel->load()) {
        f.stop = "cancelled", f.kind = LoadStop::cancelled;
      } else if (p.elapsed_s >= options.deadline_s) {
        f.stop = "deadline of " + std::to_string(options.deadline_s * 1000) + " ms reached";
        f.kind = LoadStop::deadline;
      } else {
        try {
          const std::optional<std::string> level = chooser.choose(chunks[i], p);
          if (!level) {
            f.stop = "the planner chose to recompute from here", f.kind = LoadStop::planner;
          } else {
            f.level = *level;
            const Clock::time_point f0 = Clock::now();
            std::optional<std::vector<uint8_t>> v =
                store.get_chunk(chunks[i], *level, tokens.subspan(i * ct, ct));
            const double dt = seconds_since(f0);
            if (!v) {
              f.stop = "level " + *level + " of chunk " + std::to_string(i) + " is missing";
              f.kind = LoadStop::missing;
            } else {
              if (chooser.observe) chooser.observe(v->size(), dt);
              std::lock_guard lock(mu);
              progress.bytes_fetched += v->size();
              progress.fetch_s += dt;
              f.value = std::move(*v);
            }
          }
        } catch (const std::exception& e) {
          f.stop = std::string("fetching failed: ") + e.what(), f.kind = LoadStop::failed;
        }
      }
      const bool last = !f.stop.empty();
      {
        std::lock_guard lock(mu);
        queue.push_back(std::move(f));
      }
      cv.notify_all();
      if (last) return;
    }
  });

  for (size_t i = 0; i < chunks.size(); ++i) {
    Fetched f;
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return !queue.empty(); });
      f = std::move(queue.front());
      queue.pop_front();
    }
    cv.notify_all();
    if (!f.stop.empty()) {
      report.stop_reason = f.stop, report.stop = f.kind;
      break;
    }
    if (options.cancel != nullptr && options.cancel->load()) {
      report.stop_reason = "cancelled", report.stop = LoadStop::cancelled;
      break;
    }
    const Clock::time_point d0 = Clock::now();
    try {
      sink.decode(chunks[i], f.level, f.value);
    } catch (const std::exception& e) {
      report.stop_reason =
          "chunk " + std::to_string(i) + " level " + f.level + " failed verification: " + e.what();
      report.stop = LoadStop::failed;
      break;
    }
    report.decode_s += seconds_since(d0);
    report.chunks_loaded = i + 1;
    report.tokens_loaded = (i + 1) * ct;
    report.levels.push_back(f.level);
    report.bytes_fetched += f.value.size();
  }
  {
    std::lock_guard lock(mu);
    stop_fetching = true;
    report.fetch_s = progress.fetch_s;
  }
  cv.notify_all();
  fetcher.join();
  report.load_s = seconds_since(t0);
  return report;
}

}  // namespace cachegen
