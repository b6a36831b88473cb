#include "support/peer_report.h"

#include <benchmark/benchmark.h>

#include <cstdio>

namespace cachegen::bench {
namespace {

class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  CollectingReporter(std::map<std::string, Result>* out, bool quiet) : out_(out), quiet_(quiet) {}
  bool ReportContext(const Context& c) override {
    return quiet_ ? true : ConsoleReporter::ReportContext(c);
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Aggregate) continue;
      Result res;
      auto it = r.counters.find("bytes_per_second");
      if (it != r.counters.end()) res.bytes_per_second = it->second;
      it = r.counters.find("items_per_second");
      if (it != r.counters.end()) res.items_per_second = it->second;
      res.real_time_ns = r.GetAdjustedRealTime();
      const auto [at, first] = out_->try_emplace(r.benchmark_name(), res);
      if (!first && res.real_time_ns < at->second.real_time_ns) at->second = res;
    }
    if (!quiet_) ConsoleReporter::ReportRuns(runs);
  }

 private:
  std::map<std::string, Result>* out_;
  bool quiet_;
};

}  // namespace

std::map<std::string, Result> run_benchmarks(int* argc, char** argv, bool quiet) {
  benchmark::Initialize(argc, argv);
  std::map<std::string, Result> results;
  CollectingReporter reporter(&results, quiet);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return results;
}

void print_comparisons(const std::map<std::string, Result>& results,
                       const std::vector<Comparison>& rows) {
  std::printf("\n%-44s %12s %12s %9s\n", "measurement", "GB/s", "peer GB/s", "ratio");
  for (const Comparison& c : rows) {
    const auto a = results.find(c.name), b = results.find(c.peer);
    if (a == results.end() || b == results.end()) continue;
    const double x = a->second.bytes_per_second, y = b->second.bytes_per_second;
    std::printf("%-44s %12.2f %12.2f %8.2fx  (peer: %s)\n", c.label.c_str(), x / 1e9, y / 1e9,
                y > 0 ? x / y : 0.0, c.peer.c_str());
  }
}

}  // namespace cachegen::bench
