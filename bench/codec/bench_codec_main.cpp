//   bench_codec [--json] [--input FILE.npy] [--bits N] [--min-time SECONDS] [--repetitions N]
//               [--filter REGEX] [--profile FILE.cgprof]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "codec_bench.h"

int main(int argc, char** argv) {
  cachegen::bench::CodecBenchOptions o;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      o.json = true;
    } else if (std::strcmp(argv[i], "--input") == 0 && i + 1 < argc) {
      o.input_npy = argv[++i];
    } else if (std::strcmp(argv[i], "--bits") == 0 && i + 1 < argc) {
      o.bits = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--min-time") == 0 && i + 1 < argc) {
      o.min_time_s = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--repetitions") == 0 && i + 1 < argc) {
      o.repetitions = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
      o.filter = argv[++i];
    } else if (std::strcmp(argv[i], "--profile") == 0 && i + 1 < argc) {
      o.profile = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: bench_codec [--json] [--input FILE.npy] [--bits N] [--min-time S] "
                   "[--repetitions N] [--filter REGEX] [--profile FILE.cgprof]\n");
      return 2;
    }
  }
  try {
    return cachegen::bench::run_codec_benchmark(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_codec: %s\n", e.what());
    return 1;
  }
}
