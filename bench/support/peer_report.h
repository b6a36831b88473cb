// Benchmark support: run Google Benchmark, keep every result, and print each speed as a
// ratio to a peer measured in the same run (memcpy, zstd), because the machines are shared
// and noisy: absolute numbers drift, ratios much less.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cachegen::bench {

struct Result {
  // Counters "bytes_per_second" (Google Benchmark's SetBytesProcessed) and so on.
  double bytes_per_second = 0;
  double items_per_second = 0;  // SetItemsProcessed
  double real_time_ns = 0;      // per iteration
};

// Runs the registered benchmarks (argc/argv as Google Benchmark takes them), printing the
// usual console table unless `quiet`, and returns results by benchmark name. With
// --benchmark_repetitions=N, a name's result is its fastest repetition (the least disturbed by
// other work on a shared machine; its peers are measured the same way); aggregates are not kept.
std::map<std::string, Result> run_benchmarks(int* argc, char** argv, bool quiet = false);

// One row of a comparison table: `name`'s speed next to `peer`'s, as a ratio.
struct Comparison {
  std::string label, name, peer;
};
void print_comparisons(const std::map<std::string, Result>& results,
                       const std::vector<Comparison>& rows);

}  // namespace cachegen::bench
