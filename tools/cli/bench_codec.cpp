// `cachegen bench codec`: the codec benchmark runner (bench/codec), when built with benchmarks.
#include <cstdio>

#include "commands.h"
#if defined(CACHEGEN_HAVE_CODEC_BENCH)
#include "codec_bench.h"
#endif
#include "cachegen/error.h"

namespace cachegen::cli {

void add_bench_codec(CLI::App& bench) {
#if defined(CACHEGEN_HAVE_CODEC_BENCH)
  auto opts = std::make_shared<cachegen::bench::CodecBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "codec", "codec encode/decode speed and size next to zstd -1/-19 and memcpy");
  cmd->add_flag("--json", opts->json, "print one JSON object");
  cmd->add_option("--input", opts->input_npy,
                  ".npy of fp16 KV [n_layers, 2, n_tokens, n_kv_heads, head_dim], or a .cgkv "
                  "(default: a correlated synthetic set)");
  cmd->add_option("--bits", opts->bits, "quantization bits")->check(CLI::Range(1, 8));
  cmd->add_option("--group-size", opts->group_size, "tokens per group");
  cmd->add_option("--min-time", opts->min_time_s, "seconds per measurement");
  cmd->add_option("--repetitions", opts->repetitions,
                  "runs of each measurement, the fastest reported (for noisy machines)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--profile", opts->profile,
                  "calibration profile of the input's model: also measure the transform path "
                  "(codec 2) at the quantized file's size");
  cmd->callback([opts] {
    const int rc = cachegen::bench::run_codec_benchmark(*opts);
    if (rc != 0) throw Error(ErrorCode::io_error, "codec benchmark failed");
  });
#else
  CLI::App* cmd =
      bench.add_subcommand("codec", "(not built: configure with CACHEGEN_BUILD_BENCH=ON)");
  cmd->allow_extras();
  cmd->callback([] {
    throw Error(ErrorCode::invalid_argument,
                "this cachegen was built without benchmarks (CACHEGEN_BUILD_BENCH=OFF)");
  });
#endif
}

}  // namespace cachegen::cli
