// Quantize / dequantize throughput in GB/s of fp16, one thread and all threads, each next to
// memcpy of the same bytes measured in the same run.
//   quant_bench [--benchmark_min_time=0.2] [google benchmark flags]
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "cachegen/quant.h"
#include "cachegen/runtime.h"
#include "support/peer_report.h"

namespace {

using namespace cachegen;

constexpr size_t kHeads = 32, kTokens = 4096, kDim = 128, kBits = 4, kGroup = 32;
constexpr size_t kElems = kHeads * kTokens * kDim;

// A realistic KV-like input: per-channel random walks with channel-dependent scale, fp16.
const std::vector<Half>& input() {
  static const std::vector<Half> x = [] {
    std::vector<Half> v(kElems);
    std::mt19937 rng(1);
    std::normal_distribution<float> n01;
    for (size_t h = 0; h < kHeads; ++h) {
      for (size_t c = 0; c < kDim; ++c) {
        float walk = 0, amp = 0.1f + static_cast<float>(c % 7);
        for (size_t t = 0; t < kTokens; ++t) {
          walk += 0.1f * n01(rng);
          v[(h * kTokens + t) * kDim + c] = float_to_half(amp * (walk + 0.3f * n01(rng)));
        }
      }
    }
    return v;
  }();
  return x;
}

void set_bytes(benchmark::State& st, size_t bytes) {
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * bytes));
}

void BM_memcpy_fp16(benchmark::State& st) {
  const std::vector<Half>& x = input();
  std::vector<Half> y(x.size());
  for (auto _ : st) {
    std::memcpy(y.data(), x.data(), x.size() * sizeof(Half));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes(st, kElems * sizeof(Half));
}

// memcpy split over all threads (the peer of the all-thread kernels).
void BM_memcpy_fp16_threads(benchmark::State& st) {
  const std::vector<Half>& x = input();
  std::vector<Half> y(x.size());
  const size_t n = thread_count(), chunk = (x.size() + n - 1) / n;
  for (auto _ : st) {
    std::vector<std::thread> ts;
    for (size_t t = 0; t < n; ++t) {
      ts.emplace_back([&, t] {
        const size_t lo = t * chunk, hi = std::min(x.size(), lo + chunk);
        if (lo < hi) std::memcpy(y.data() + lo, x.data() + lo, (hi - lo) * sizeof(Half));
      });
    }
    for (auto& th : ts) th.join();
    benchmark::ClobberMemory();
  }
  set_bytes(st, kElems * sizeof(Half));
}

void BM_quantize(benchmark::State& st) {
  const std::vector<Half>& x = input();
  set_thread_count(static_cast<size_t>(st.range(0)));
  std::vector<CodeStream> s;  // reused, like memcpy's destination: no page faults timed
  quantize_to_codes_batch_into(x, kHeads, kTokens, kDim, kBits, kGroup, s);
  for (auto _ : st) {
    quantize_to_codes_batch_into(x, kHeads, kTokens, kDim, kBits, kGroup, s);
    benchmark::DoNotOptimize(s.data());
  }
  set_thread_count(0);
  set_bytes(st, kElems * sizeof(Half));
}

void BM_dequant(benchmark::State& st) {
  static const std::vector<CodeStream> s =
      quantize_to_codes_batch(input(), kHeads, kTokens, kDim, kBits, kGroup);
  set_thread_count(static_cast<size_t>(st.range(0)));
  std::vector<Half> y(kElems);
  for (auto _ : st) {
    dequant_codes_batch_into(s, y);
    benchmark::DoNotOptimize(y.data());
  }
  set_thread_count(0);
  set_bytes(st, kElems * sizeof(Half));
}

const int kAll = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

BENCHMARK(BM_memcpy_fp16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_memcpy_fp16_threads)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_quantize)->Arg(1)->Arg(kAll)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_dequant)->Arg(1)->Arg(kAll)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  std::printf(
      "cachegen quant_bench: %zu heads x %zu tokens x %zu dim fp16 (%.1f MB), %zu bits, "
      "group %zu, SIMD path %s, %d threads\n",
      kHeads, kTokens, kDim, kElems * 2 / 1e6, kBits, kGroup, simd_path_name(simd_path()), kAll);
  const auto r = cachegen::bench::run_benchmarks(&argc, argv);
  const std::string all = std::to_string(kAll);
  cachegen::bench::print_comparisons(
      r,
      {{"quantize fp16->codes, 1 thread", "BM_quantize/1/real_time", "BM_memcpy_fp16/real_time"},
       {"dequantize codes->fp16, 1 thread", "BM_dequant/1/real_time", "BM_memcpy_fp16/real_time"},
       {"quantize fp16->codes, " + all + " threads", "BM_quantize/" + all + "/real_time",
        "BM_memcpy_fp16_threads/real_time"},
       {"dequantize codes->fp16, " + all + " threads", "BM_dequant/" + all + "/real_time",
        "BM_memcpy_fp16_threads/real_time"}});
  return 0;
}
