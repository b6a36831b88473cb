// The C++ side of python/bench/bench_overhead.py: times the library calls cachegen.encode and
// cachegen.decode make (encode_kv_array; CgkvReader::from_bytes + read_tokens_into a fresh
// buffer), with the default options, on the .npy given.
//   cachegen_bind_overhead_bench KV.npy OUT.cgkv REPS  ->  {"encode_ns": median, "decode_ns": ...}
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cachegen/container.h"
#include "cachegen/encode.h"
#include "cachegen/npy.h"

namespace {

template <typename Fn>
double median_ns(int reps, Fn&& fn) {
  std::vector<double> ns;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ns.push_back(
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(ns.begin(), ns.begin() + ns.size() / 2, ns.end());
  return ns[ns.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s KV.npy OUT.cgkv REPS\n", argv[0]);
    return 2;
  }
  try {
    const cachegen::NpyArray a = cachegen::read_npy(argv[1]);
    if (a.dtype != cachegen::NpyDType::f16) throw std::runtime_error("KV.npy must be float16");
    const cachegen::ModelShape shape =
        cachegen::kv_array_model_shape(a.shape, cachegen::ErrorCode::corrupt_input, argv[1]);
    cachegen::KVArrayView kv;
    kv.n_tokens = a.shape[2];
    kv.n_kv_heads = a.shape[3];
    kv.head_dim = a.shape[4];
    const size_t layer_bytes = 2 * kv.n_tokens * kv.n_kv_heads * kv.head_dim * 2;
    for (size_t l = 0; l < a.shape[0]; ++l) kv.layers.push_back(a.data.data() + l * layer_bytes);
    const cachegen::KVEncodeOptions options;
    const int reps = std::atoi(argv[3]);
    std::vector<uint8_t> file;
    const double enc =
        median_ns(reps, [&] { file = cachegen::encode_kv_array(kv, shape, options); });
    const double dec = median_ns(reps, [&] {
      const cachegen::CgkvReader r = cachegen::CgkvReader::from_bytes(file);  // a copy, as Python
      std::vector<cachegen::Half> out(r.read_elements(0, r.info().n_tokens));
      r.read_tokens_into(0, r.info().n_tokens, out);
    });
    cachegen::write_file_atomic(argv[2], file);
    std::printf("{\"encode_ns\": %.0f, \"decode_ns\": %.0f}\n", enc, dec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
