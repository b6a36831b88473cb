// The codec benchmark behind `bench_codec` and `cachegen bench codec`.
//
// Encodes and decodes a set of heads (default: a realistic correlated synthetic set, 16 heads
// x 4096 tokens x 128 channels; with input_npy: fp16 KV [n_layers, 2, n_tokens, n_kv_heads,
// head_dim], one head per (layer, K/V, kv head)) and reports, single-thread and all threads,
// elements per second of encode (codes -> bytes, fp16 -> bytes) and decode (bytes -> codes,
// bytes -> fp16, returned or into a caller's buffer), next to zstd -1 / -19 on the same codes
// (one byte per code) and memcpy, all measured in the same run, as ratios. The file path is
// measured too: the same KV as a .cgkv (or the input .cgkv itself) decoded whole into a caller's
// buffer and encoded from the array.
#pragma once

#include <string>

namespace cachegen::bench {

struct CodecBenchOptions {
  bool json = false;      // print one JSON object instead of tables
  std::string input_npy;  // .npy or .cgkv; empty = synthetic input
  int bits = 3;           // quantization bits (1..8)
  size_t group_size = 32;
  double min_time_s = 0.2;  // Google Benchmark's minimum time per benchmark
  int repetitions = 1;      // runs of each benchmark; the fastest is reported
  std::string filter;       // Google Benchmark regex; empty = all (for profiling one path)
  // A calibration profile of the input's model: the transform path (codec 2) too, at the size
  // of the quantized file (and a .cgkv input written with it is read with it).
  std::string profile;
};

// Returns a process exit status (0 on success); prints to stdout. Throws cachegen::Error for
// an unreadable or mis-shaped input file.
int run_codec_benchmark(const CodecBenchOptions& options);

}  // namespace cachegen::bench
