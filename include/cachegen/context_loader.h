// cachegen: loading a stored prefix from a ContextStore, pipelined (fetch of chunk i+1 overlaps
// the decode of chunk i), with a deadline, cancellation, and a precise report of what was
// loaded and what must be recomputed, and why. Engine-independent: the engine adapter (e.g. the
// llama one) implements ChunkSink and prefills whatever the load did not cover.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cachegen/context_store.h"
#include "cachegen/planner.h"

namespace cachegen {

// Receives verified chunk values in order (chunk 0, 1, ...), on the thread that called
// load_prefix. decode() throws cachegen::Error when a value cannot be used (corrupt, another
// model): the load stops there and the rest is recomputed.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  virtual void decode(const StoredChunk& chunk, std::string_view level,
                      std::span<const uint8_t> value) = 0;
};

// What the loader knows when choosing the next chunk's level.
struct LoadProgress {
  size_t next_chunk = 0;       // the chunk to choose for
  double elapsed_s = 0;        // since the load began
  uint64_t bytes_fetched = 0;  // so far
  double fetch_s = 0;          // time spent fetching so far
};

// Picks the level to fetch chunk `progress.next_chunk` at, from `chunk.levels`; std::nullopt
// = stop loading and recompute from this chunk on (recomputing is a suffix: a prefill runs in
// order). `observe` (may be empty) is told each fetch's bytes and seconds, for a throughput
// estimate.
struct LevelChooser {
  std::function<std::optional<std::string>(const StoredChunk& chunk, const LoadProgress&)> choose;
  std::function<void(uint64_t bytes, double seconds)> observe;
};

// Always `level`; a chunk without it is recomputed (with the rest).
LevelChooser fixed_level_chooser(std::string level);

// A chooser driven by a PlannerPolicy (planner.h): the chunks' options are the levels of
// `level_kl` (name, measured KL; in that order) stored for every one of `chunks`, with their
// bytes from the manifests; the throughput estimate starts at `initial_bytes_per_s` and is
// updated after every fetch; `deadline_s` counts from the start of the load. The policy and
// the chunks must outlive the chooser. Throws invalid_argument when no level is stored for
// every chunk.
LevelChooser planned_chooser(const PlannerPolicy& policy, std::span<const StoredChunk> chunks,
                             const std::vector<std::pair<std::string, double>>& level_kl,
                             const CostModel& cost, double deadline_s, double initial_bytes_per_s);

struct LoadOptions {
  double deadline_s = std::numeric_limits<double>::infinity();  // no chunk is fetched after it
  size_t prefetch = 2;  // values fetched ahead of the decoder (bounded memory)
  const std::atomic<bool>* cancel = nullptr;  // set to stop at the next chunk boundary
};

// Why a load stopped before the last chunk offered.
enum class LoadStop : uint8_t {
  none = 0,   // every chunk offered was loaded
  deadline,   // the deadline passed before the next fetch
  planner,    // the chooser chose to recompute from here
  cancelled,  // LoadOptions::cancel was set
  missing,    // the chosen level's value is gone from the store
  failed,     // fetching or verifying failed (store error, corrupt value, sink refusal)
};

struct LoadReport {
  size_t chunks_loaded = 0;  // chunks 0..chunks_loaded-1 are decoded into the sink
  size_t tokens_loaded = 0;  // their tokens
  uint64_t bytes_fetched = 0;
  double fetch_s = 0, decode_s = 0, load_s = 0;  // fetch and decode summed; load = wall time
  std::vector<std::string> levels;               // level of each loaded chunk
  // Empty when every chunk offered was loaded; else why loading stopped at chunk
  // chunks_loaded (deadline, the chooser chose recompute, cancelled, missing value, a value
  // that failed verification or decoding, the store failing).
  std::string stop_reason;
  LoadStop stop = LoadStop::none;
};

// Loads `chunks` (a ContextStore::lookup result for `tokens`, possibly shortened by the caller)
// into `sink`, fetching on a background thread up to options.prefetch values ahead. Never
// throws for a chunk that fails: it stops and reports; throws only for invalid arguments.
LoadReport load_prefix(const ContextStore& store, std::span<const int32_t> tokens,
                       std::span<const StoredChunk> chunks, const LevelChooser& chooser,
                       ChunkSink& sink, const LoadOptions& options = {});

}  // namespace cachegen
