#include "codec_bench.h"

#include <benchmark/benchmark.h>
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>

#include "cachegen/codec.h"
#include "cachegen/container.h"
#include "cachegen/encode.h"
#include "cachegen/error.h"
#include "cachegen/npy.h"
#include "cachegen/runtime.h"
#include "support/peer_report.h"

namespace cachegen::bench {
namespace {

struct Input {
  size_t n_heads = 0, n_rows = 0, dim = 0;
  std::vector<Half> values;  // [n_heads, n_rows, dim]
  std::string source;
  // The same values as a KV file's tensor [n_layers, 2, n_tokens, n_kv_heads, head_dim] (for
  // the lossless tier): the .npy's own array, or the synthetic heads as 1-head layers.
  ModelShape shape;
  std::vector<Half> kv;
  std::vector<uint8_t> cgkv;  // the input .cgkv's bytes (else empty)
};

ModelShape kv_shape(size_t n_layers, size_t n_kv_heads, size_t head_dim) {
  ModelShape s;
  s.architecture = "bench";
  s.n_layers = static_cast<int>(n_layers);
  s.n_kv_heads = static_cast<int>(n_kv_heads);
  s.head_dim = static_cast<int>(head_dim);
  return s;
}

// Per-channel random walks with channel-dependent amplitude plus a little noise: KV-like.
Input synthetic_input() {
  Input in{16, 4096, 128, {}, "synthetic correlated 16x4096x128", {}, {}, {}};
  in.values.resize(in.n_heads * in.n_rows * in.dim);
  std::mt19937 rng(1);
  std::normal_distribution<float> n01;
  for (size_t h = 0; h < in.n_heads; ++h)
    for (size_t c = 0; c < in.dim; ++c) {
      float walk = 0;
      const float amp = 0.1f + static_cast<float>(c % 7);
      for (size_t t = 0; t < in.n_rows; ++t) {
        walk += 0.1f * n01(rng);
        in.values[(h * in.n_rows + t) * in.dim + c] = float_to_half(amp * (walk + 0.3f * n01(rng)));
      }
    }
  in.shape = kv_shape(in.n_heads / 2, 1, in.dim);
  in.kv = in.values;  // [head = (layer, K/V), token, dim] is [layers, 2, tokens, 1, dim]
  return in;
}

// fp16 [n_layers, 2, n_tokens, n_kv_heads, head_dim] -> heads [(layer, kv, head), token, dim].
// A .cgkv input is decoded to that array first (recomputed layers as zeros), and kept.
Input file_input(const std::string& path, const std::shared_ptr<const KvProfile>& profile) {
  NpyArray a;
  std::vector<uint8_t> cgkv;
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".cgkv") == 0) {
    CgkvReader reader = CgkvReader::open_file(path);
    reader.set_profile(profile);
    const CgkvInfo& info = reader.info();
    if (info.n_attention_layers() != info.n_layers) {
      throw Error(ErrorCode::invalid_argument, path + ": layers without attention are not benched");
    }
    a.dtype = NpyDType::f16;
    a.shape = {static_cast<size_t>(info.n_layers), 2, info.n_tokens,
               static_cast<size_t>(info.n_kv_heads), static_cast<size_t>(info.head_dim)};
    const std::vector<Half> kv = reader.read_tokens(0, info.n_tokens);
    a.data.resize(kv.size() * sizeof(Half));
    if (!kv.empty()) std::memcpy(a.data.data(), kv.data(), a.data.size());
    cgkv = read_file_bytes(path);
  } else {
    a = read_npy(path);
  }
  if (a.dtype != NpyDType::f16 || a.shape.size() != 5 || a.shape[1] != 2) {
    throw Error(ErrorCode::invalid_argument,
                path + ": expected fp16 [n_layers, 2, n_tokens, n_kv_heads, head_dim]");
  }
  const size_t L = a.shape[0], T = a.shape[2], H = a.shape[3], D = a.shape[4];
  Input in{L * 2 * H, T, D, {}, path, {}, {}, {}};
  in.cgkv = std::move(cgkv);
  in.values.resize(a.size());
  const auto src = a.as<Half>();
  for (size_t lk = 0; lk < L * 2; ++lk)
    for (size_t t = 0; t < T; ++t)
      for (size_t h = 0; h < H; ++h)
        std::memcpy(&in.values[((lk * H + h) * T + t) * D], &src[((lk * T + t) * H + h) * D],
                    D * sizeof(Half));
  in.shape = kv_shape(L, H, D);
  in.kv.assign(src.begin(), src.end());
  return in;
}

// Items are elements; bytes are set to the same count (one byte per code) so that the
// peer tables compare elements per second directly.
void items(benchmark::State& st, size_t n) {
  st.SetItemsProcessed(static_cast<int64_t>(st.iterations() * n));
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * n));
}

}  // namespace

int run_codec_benchmark(const CodecBenchOptions& o) {
  const std::shared_ptr<const KvProfile> profile =
      o.profile.empty() ? nullptr : std::make_shared<const KvProfile>(read_profile(o.profile));
  const Input in = o.input_npy.empty() ? synthetic_input() : file_input(o.input_npy, profile);
  const size_t n = in.values.size();
  const std::vector<CodeStream> streams =
      quantize_to_codes_batch(in.values, in.n_heads, in.n_rows, in.dim, o.bits, o.group_size);
  // Lossless parameters (as quantized, fp32) and the compact-parameter entry point.
  const std::vector<uint8_t> coded = encode_batch(streams);
  std::vector<float> f32(n);
  for (size_t i = 0; i < n; ++i) f32[i] = half_to_float(in.values[i]);
  const std::vector<uint8_t> coded_values =
      encode_values_batch(f32, in.n_heads, in.n_rows, in.dim, o.bits, o.group_size);
  // Coded bytes without parameters, of the batch exactly as encode_batch lays it out (shared
  // models and slices where it chose them): the part comparable to zstd on the bare codes.
  const CodedSizeReport batch_report = coded_size_report_batch(coded);
  const size_t code_payload = coded.size() - batch_report.param_bytes;
  // The same codes for the peers: one byte per code, real rows only.
  std::vector<uint8_t> codes;
  codes.reserve(n);
  for (const auto& s : streams)
    codes.insert(codes.end(), s.codes.begin(), s.codes.begin() + s.n_rows * s.dim);
  std::vector<uint8_t> z1(ZSTD_compressBound(n)), z19(ZSTD_compressBound(n));
  z1.resize(ZSTD_compress(z1.data(), z1.size(), codes.data(), n, 1));
  z19.resize(ZSTD_compress(z19.data(), z19.size(), codes.data(), n, 19));
  size_t raw_params = 0, fixed = 0;
  for (const auto& s : streams) raw_params += s.scale.size() * 4, fixed += fixed_width_bytes(s);

  // Lossless tier: the whole KV as a lossless .cgkv (chunks of 1024 tokens, as the CLI and the
  // llama exact level), against byte-split + zstd -19 (high and low bytes of the whole tensor,
  // two planes compressed apart) for size and zstd -1 on the fp16 bytes for speed.
  const size_t kv_tokens = in.n_rows;
  const std::vector<uint8_t> lossless = write_cgkv_lossless(in.shape, in.kv, kv_tokens, 1024);
  const std::span<const uint8_t> fp16_bytes(reinterpret_cast<const uint8_t*>(in.kv.data()), 2 * n);
  size_t bytesplit_z19 = 0;
  {
    std::vector<uint8_t> plane(n), z(ZSTD_compressBound(n));
    for (const int shift : {8, 0}) {
      for (size_t i = 0; i < n; ++i) plane[i] = static_cast<uint8_t>(in.kv[i].bits >> shift);
      bytesplit_z19 += ZSTD_compress(z.data(), z.size(), plane.data(), n, 19);
    }
  }
  std::vector<uint8_t> z1_fp16(ZSTD_compressBound(2 * n));
  z1_fp16.resize(
      ZSTD_compress(z1_fp16.data(), z1_fp16.size(), fp16_bytes.data(), fp16_bytes.size(), 1));

  const size_t all_threads = thread_count();
  struct Mode {
    const char* suffix;
    size_t threads;
  };
  const Mode modes[] = {{"1t", 1}, {"mt", all_threads}};
  // decode_batch_to_half of `bytes` into one buffer on `threads`.
  auto decode_into = [&](const std::vector<uint8_t>& bytes, size_t threads) {
    return [&bytes, threads, n](benchmark::State& st) {
      set_thread_count(threads);
      std::vector<Half> out(n);
      for (auto _ : st) {
        decode_batch_to_half(bytes, out);
        benchmark::DoNotOptimize(out.data());
      }
      items(st, n);
    };
  };
  for (const Mode& m : modes) {
    const size_t threads = m.threads;
    const std::string sfx = std::string("/") + m.suffix;
    benchmark::RegisterBenchmark(("encode_codes" + sfx).c_str(),
                                 [&, threads](benchmark::State& st) {
                                   set_thread_count(threads);
                                   for (auto _ : st)
                                     benchmark::DoNotOptimize(encode_batch(streams));
                                   items(st, n);
                                 });
    benchmark::RegisterBenchmark(("encode_fp16" + sfx).c_str(), [&, threads](benchmark::State& st) {
      set_thread_count(threads);
      for (auto _ : st) {
        benchmark::DoNotOptimize(
            encode_values_batch(in.values, in.n_heads, in.n_rows, in.dim, o.bits, o.group_size));
      }
      items(st, n);
    });
    benchmark::RegisterBenchmark(("decode_codes" + sfx).c_str(),
                                 [&, threads](benchmark::State& st) {
                                   set_thread_count(threads);
                                   for (auto _ : st) benchmark::DoNotOptimize(decode_batch(coded));
                                   items(st, n);
                                 });
    benchmark::RegisterBenchmark(("decode_fp16" + sfx).c_str(), [&, threads](benchmark::State& st) {
      set_thread_count(threads);
      for (auto _ : st) benchmark::DoNotOptimize(decode_batch_to_half(coded));
      items(st, n);
    });
    // The same into one caller's buffer (as zstd's decode below): the kernel without the
    // returned vector's allocation and fill.
    benchmark::RegisterBenchmark(("decode_fp16_into" + sfx).c_str(), decode_into(coded, threads));
  }
  // The fused decode of encode_values' stream (compact parameters, as files hold them).
  for (const Mode& m : modes) {
    const size_t threads = m.threads;
    benchmark::RegisterBenchmark((std::string("decode_values_fp16/") + m.suffix).c_str(),
                                 [&, threads](benchmark::State& st) {
                                   set_thread_count(threads);
                                   for (auto _ : st)
                                     benchmark::DoNotOptimize(decode_batch_to_half(coded_values));
                                   items(st, n);
                                 });
    benchmark::RegisterBenchmark((std::string("decode_values_fp16_into/") + m.suffix).c_str(),
                                 decode_into(coded_values, threads));
  }
  for (const Mode& m : modes) {
    benchmark::RegisterBenchmark(
        (std::string("lossless_encode/") + m.suffix).c_str(),
        [&, threads = m.threads](benchmark::State& st) {
          set_thread_count(threads);
          for (auto _ : st) {
            benchmark::DoNotOptimize(write_cgkv_lossless(in.shape, in.kv, kv_tokens, 1024));
          }
          items(st, n);
        });
  }
  // Decoding a whole .cgkv into one caller's buffer (CgkvReader::read_tokens_into) on `threads`.
  const auto read_whole_file = [&](const std::vector<uint8_t>& bytes, size_t threads,
                                   std::shared_ptr<const KvProfile> with) {
    return [&bytes, threads, with, n](benchmark::State& st) {
      set_thread_count(threads);
      CgkvReader reader = CgkvReader::from_bytes(bytes);
      if (with) reader.set_profile(with);
      std::vector<Half> out(reader.read_elements(0, reader.info().n_tokens));
      for (auto _ : st) {
        reader.read_tokens_into(0, reader.info().n_tokens, out);
        benchmark::ClobberMemory();
      }
      items(st, n);
    };
  };
  benchmark::RegisterBenchmark("lossless_decode/1t", read_whole_file(lossless, 1, nullptr));
  benchmark::RegisterBenchmark("lossless_decode/mt",
                               read_whole_file(lossless, all_threads, nullptr));
  // The file path: the same KV as a quantized .cgkv (`cachegen encode --bits B --group-size G
  // --layer-groups 1`, or the input .cgkv itself), decoded whole into the caller's buffer
  // (CgkvReader::read_tokens_into) and encoded from the array (encode_kv_array), next to the
  // fused batch decode/encode above.
  KVEncodeOptions file_options;
  file_options.bits = o.bits;
  file_options.group_size = o.group_size;
  file_options.layer_groups = 1;
  file_options.chunk_tokens = (256 + o.group_size - 1) / o.group_size * o.group_size;
  KVArrayView view;
  view.n_tokens = in.n_rows;
  view.n_kv_heads = static_cast<size_t>(in.shape.n_kv_heads);
  view.head_dim = in.dim;
  for (int l = 0; l < in.shape.n_layers; ++l)
    view.layers.push_back(in.kv.data() +
                          static_cast<size_t>(l) * 2 * in.n_rows * view.n_kv_heads * in.dim);
  const std::vector<uint8_t> file =
      in.cgkv.empty() ? encode_kv_array(view, in.shape, file_options) : in.cgkv;
  benchmark::RegisterBenchmark("file_decode/1t", read_whole_file(file, 1, profile));
  benchmark::RegisterBenchmark("file_decode/mt", read_whole_file(file, all_threads, profile));
  // The same KV in chunks of 64 tokens: short chunks' tensors (a context's last chunk, or a
  // store's small ones) are short payloads, stories260K's of 4 lanes.
  std::vector<uint8_t> short_chunks;
  KVEncodeOptions short_options = file_options;
  short_options.chunk_tokens = (64 + o.group_size - 1) / o.group_size * o.group_size;
  if (in.cgkv.empty()) {
    short_chunks = encode_kv_array(view, in.shape, short_options);
    benchmark::RegisterBenchmark("file_decode_chunks64/1t",
                                 read_whole_file(short_chunks, 1, profile));
  }
  // The fused kernel on a quantized file's own data: each chunk's tensors (codec batches,
  // framed as FORMAT.md's chunk payload says) decoded by decode_batch_to_half one after
  // another into one buffer, without the file path's checksums, placement into the caller's
  // [layers, 2, tokens, heads, dim] layout or RoPE. The file decode's time over this one is
  // what the file path adds.
  struct Parts {
    std::vector<std::vector<uint8_t>> batches;
    std::vector<size_t> values;  // each batch's decoded size
  };
  const auto file_parts = [](const std::vector<uint8_t>& bytes) {
    Parts p;
    const CgkvReader r = CgkvReader::from_bytes(bytes);
    if (r.info().codec != ContainerCodec::quantized) return p;
    for (size_t c = 0; c < r.info().chunks.size(); ++c) {
      const std::vector<uint8_t> chunk = r.read_chunk(c);
      size_t at = 0;
      for (const uint64_t b : r.chunk_tensor_bytes(c)) {
        if (b == 0) continue;                           // a recomputed layer: nothing in the chunk
        for (uint64_t v = b; v >= 0x80; v >>= 7) ++at;  // the size's varint
        ++at;
        p.batches.emplace_back(chunk.begin() + static_cast<ptrdiff_t>(at),
                               chunk.begin() + static_cast<ptrdiff_t>(at + b));
        p.values.push_back(decode_batch_to_half(p.batches.back()).size());
        at += b;
      }
      if (at != chunk.size()) throw std::runtime_error("bench: chunk framing not understood");
    }
    return p;
  };
  const auto decode_parts = [n](const Parts& p) {
    return [&p, n](benchmark::State& st) {
      set_thread_count(1);
      size_t total = 0;
      for (size_t v : p.values) total += v;
      std::vector<Half> out(total);
      for (auto _ : st) {
        size_t at = 0;
        for (size_t i = 0; i < p.batches.size(); ++i) {
          decode_batch_to_half(p.batches[i], std::span<Half>(out).subspan(at, p.values[i]));
          at += p.values[i];
        }
        benchmark::ClobberMemory();
      }
      items(st, n);
    };
  };
  const Parts parts = file_parts(file);
  if (!parts.batches.empty())
    benchmark::RegisterBenchmark("file_parts_decode/1t", decode_parts(parts));
  // The fused encode of the same tensors: each chunk's K or V heads [heads, chunk tokens, dim]
  // gathered once and encoded by encode_values_batch (at the layer's bits in the file: the
  // schedule keeps at least 2) one after another, which gives the file's own tensor bytes
  // (checked here; left out if not). The file encode's time over this one is what the file
  // path adds (the cache's groups and blocks, the container, its checksums); the fused encode
  // of the whole array above also shares models over longer runs than a chunk.
  std::vector<std::vector<Half>> part_heads;
  std::vector<size_t> part_rows;
  std::vector<int> part_bits;
  const size_t H = view.n_kv_heads, D = in.dim;
  if (in.cgkv.empty()) {
    bool same = true;
    const size_t T = in.n_rows, C = file_options.chunk_tokens;
    const CgkvReader reader = CgkvReader::from_bytes(file);
    const CgkvInfo& info = reader.info();
    for (size_t t0 = 0; t0 < T; t0 += C) {
      for (size_t lk = 0; lk < 2 * static_cast<size_t>(in.shape.n_layers); ++lk) {
        const size_t rows = std::min(C, T - t0);
        std::vector<Half> x(H * rows * D);
        for (size_t h = 0; h < H; ++h)
          std::memcpy(&x[h * rows * D], &in.values[((lk * H + h) * T + t0) * D],
                      rows * D * sizeof(Half));
        const CgkvLayerInfo& layer = info.layers[lk / 2];
        const int bits = lk % 2 == 0 ? layer.key_bits : layer.value_bits;
        const size_t i = part_heads.size();
        same = same && i < parts.batches.size() &&
               encode_values_batch(x, H, rows, D, bits, o.group_size) == parts.batches[i];
        part_heads.push_back(std::move(x));
        part_rows.push_back(rows);
        part_bits.push_back(bits);
      }
    }
    if (!same || part_heads.size() != parts.batches.size()) {
      std::fprintf(stderr,
                   "bench: file_parts_encode left out: the file's tensors are not "
                   "encode_values_batch's bytes of their heads here\n");
      part_heads.clear();
    }
  }
  if (!part_heads.empty()) {
    benchmark::RegisterBenchmark("file_parts_encode/1t", [&, H, D](benchmark::State& st) {
      set_thread_count(1);
      for (auto _ : st) {
        for (size_t i = 0; i < part_heads.size(); ++i) {
          benchmark::DoNotOptimize(
              encode_values_batch(part_heads[i], H, part_rows[i], D, part_bits[i], o.group_size));
        }
      }
      items(st, n);
    });
  }
  // A quality level's file with keys quantized before RoPE (`cachegen encode --level high
  // --rope-base 10000`): the reader re-rotates every key after decoding.
  KVEncodeOptions level_options;
  level_options.level = "high";
  level_options.rope_base = 10000.0f;
  const std::vector<uint8_t> level_file =
      in.cgkv.empty() ? encode_kv_array(view, in.shape, level_options) : std::vector<uint8_t>{};
  const Parts level_parts = level_file.empty() ? Parts{} : file_parts(level_file);
  if (!level_file.empty()) {
    benchmark::RegisterBenchmark("file_decode_level/1t", read_whole_file(level_file, 1, nullptr));
    benchmark::RegisterBenchmark("file_level_parts_decode/1t", decode_parts(level_parts));
    for (const Mode& m : modes) {
      const size_t threads = m.threads;
      benchmark::RegisterBenchmark(
          (std::string("file_encode_level/") + m.suffix).c_str(),
          [&, threads](benchmark::State& st) {
            set_thread_count(threads);
            for (auto _ : st) {
              benchmark::DoNotOptimize(encode_kv_array(view, in.shape, level_options));
            }
            items(st, n);
          });
    }
  }
  // Encoding the array into a .cgkv (encode_kv_array: its layers on `threads`).
  for (const Mode& m : modes) {
    const size_t threads = m.threads;
    benchmark::RegisterBenchmark(
        (std::string("file_encode/") + m.suffix).c_str(), [&, threads](benchmark::State& st) {
          set_thread_count(threads);
          for (auto _ : st) {
            benchmark::DoNotOptimize(encode_kv_array(view, in.shape, file_options));
          }
          items(st, n);
        });
  }
  // The same in chunks of 64 tokens (file_decode_chunks64's file).
  if (!short_chunks.empty()) {
    benchmark::RegisterBenchmark("file_encode_chunks64/1t", [&](benchmark::State& st) {
      set_thread_count(1);
      for (auto _ : st) benchmark::DoNotOptimize(encode_kv_array(view, in.shape, short_options));
      items(st, n);
    });
  }
  // The transform path (a profile given): the KV as a transform file of the quantized file's
  // size (the scale found once by the size search), decoded whole and encoded at that scale.
  std::vector<uint8_t> transform;
  KVEncodeOptions transform_options;
  if (profile) {
    transform_options.profile = profile;
    transform_options.chunk_tokens = file_options.chunk_tokens;
    const CgkvReader fr = CgkvReader::from_bytes(file);
    transform_options.bits_per_element =
        8.0 * static_cast<double>(file.size()) / static_cast<double>(fr.info().n_elements());
    transform = encode_kv_array(view, in.shape, transform_options);
    CgkvReader tr = CgkvReader::from_bytes(transform);
    // Encode at the scale the search chose: the steps are in the header.
    transform_options.bits_per_element = 0;
    transform_options.level.clear();
    const std::vector<float> unit = profile->steps(1.0);
    transform_options.scale = tr.info().layers[0].key_step / unit[0];
    benchmark::RegisterBenchmark("transform_decode/1t", read_whole_file(transform, 1, profile));
    benchmark::RegisterBenchmark("transform_encode/1t", [&](benchmark::State& st) {
      set_thread_count(1);
      for (auto _ : st) {
        benchmark::DoNotOptimize(encode_kv_array(view, in.shape, transform_options));
      }
      items(st, n);
    });
  }
  benchmark::RegisterBenchmark("zstd1_fp16_encode/1t", [&](benchmark::State& st) {
    std::vector<uint8_t> out(ZSTD_compressBound(2 * n));
    for (auto _ : st) {
      benchmark::DoNotOptimize(
          ZSTD_compress(out.data(), out.size(), fp16_bytes.data(), fp16_bytes.size(), 1));
    }
    items(st, n);
  });
  benchmark::RegisterBenchmark("zstd1_fp16_decode/1t", [&](benchmark::State& st) {
    std::vector<uint8_t> out(2 * n);
    for (auto _ : st) {
      benchmark::DoNotOptimize(
          ZSTD_decompress(out.data(), out.size(), z1_fp16.data(), z1_fp16.size()));
    }
    items(st, n);
  });
  benchmark::RegisterBenchmark("zstd1_encode/1t", [&](benchmark::State& st) {
    std::vector<uint8_t> out(ZSTD_compressBound(n));
    for (auto _ : st)
      benchmark::DoNotOptimize(ZSTD_compress(out.data(), out.size(), codes.data(), n, 1));
    items(st, n);
  });
  benchmark::RegisterBenchmark("zstd1_decode/1t", [&](benchmark::State& st) {
    std::vector<uint8_t> out(n);
    for (auto _ : st)
      benchmark::DoNotOptimize(ZSTD_decompress(out.data(), n, z1.data(), z1.size()));
    items(st, n);
  });
  benchmark::RegisterBenchmark("zstd19_decode/1t", [&](benchmark::State& st) {
    std::vector<uint8_t> out(n);
    for (auto _ : st)
      benchmark::DoNotOptimize(ZSTD_decompress(out.data(), n, z19.data(), z19.size()));
    items(st, n);
  });
  benchmark::RegisterBenchmark("memcpy_codes/1t", [&](benchmark::State& st) {
    std::vector<uint8_t> out(n);
    for (auto _ : st) {
      std::memcpy(out.data(), codes.data(), n);
      benchmark::ClobberMemory();
    }
    items(st, n);
  });

  std::string min_time = "--benchmark_min_time=" + std::to_string(o.min_time_s);
  char arg0[] = "bench_codec";
  std::string repetitions = "--benchmark_repetitions=" + std::to_string(std::max(1, o.repetitions));
  std::string filter = "--benchmark_filter=" + o.filter;
  char* argv[] = {arg0, min_time.data(), repetitions.data(), filter.data(), nullptr};
  int argc = o.filter.empty() ? 3 : 4;
  const auto r = run_benchmarks(&argc, argv, o.json);
  set_thread_count(0);
  benchmark::ClearRegisteredBenchmarks();

  auto ips = [&](const std::string& name) {
    const auto it = r.find(name);
    return it == r.end() ? 0.0 : it->second.items_per_second;
  };
  // a's speed over b's; 0 when either did not run (a --filter left it out).
  auto speed_ratio = [&](const std::string& a, const std::string& b) {
    return ips(b) > 0 ? ips(a) / ips(b) : 0.0;
  };
  nlohmann::json j;
  j["input"] = in.source;
  j["heads"] = in.n_heads;
  j["rows"] = in.n_rows;
  j["dim"] = in.dim;
  j["bits"] = o.bits;
  j["elements"] = n;
  j["threads"] = all_threads;
  j["repetitions"] = std::max(1, o.repetitions);  // speeds: the fastest of these runs
  j["simd_path"] = simd_path_name(simd_path());
  j["coded_bytes"] = coded.size();
  j["coded_values_bytes"] = coded_values.size();
  j["coded_codes_only_bytes"] = code_payload;
  j["fixed_bytes"] = fixed;
  j["zstd1_bytes"] = z1.size();
  j["zstd19_bytes"] = z19.size();
  j["zstd19_plus_fp32_params_bytes"] = z19.size() + 2 * raw_params;
  j["coded_codes_only_over_zstd19"] =
      static_cast<double>(code_payload) / static_cast<double>(z19.size());
  j["encode_elems_per_s"] = ips("encode_codes/1t");
  j["encode_fp16_elems_per_s"] = ips("encode_fp16/1t");
  j["decode_elems_per_s"] = ips("decode_codes/1t");
  j["decode_fp16_elems_per_s"] = ips("decode_fp16/1t");
  j["encode_elems_per_s_mt"] = ips("encode_codes/mt");
  j["encode_fp16_elems_per_s_mt"] = ips("encode_fp16/mt");
  j["decode_elems_per_s_mt"] = ips("decode_codes/mt");
  j["decode_fp16_elems_per_s_mt"] = ips("decode_fp16/mt");
  j["decode_fp16_into_elems_per_s"] = ips("decode_fp16_into/1t");
  j["decode_fp16_into_elems_per_s_mt"] = ips("decode_fp16_into/mt");
  j["zstd1_encode_elems_per_s"] = ips("zstd1_encode/1t");
  j["zstd1_decode_elems_per_s"] = ips("zstd1_decode/1t");
  j["zstd19_decode_elems_per_s"] = ips("zstd19_decode/1t");
  j["memcpy_bytes_per_s"] =
      r.count("memcpy_codes/1t") ? r.at("memcpy_codes/1t").bytes_per_second : 0.0;
  j["decode_over_zstd1_decode"] = speed_ratio("decode_codes/1t", "zstd1_decode/1t");
  j["encode_over_zstd1_encode"] = speed_ratio("encode_codes/1t", "zstd1_encode/1t");
  j["decode_fp16_over_zstd1_decode"] = speed_ratio("decode_fp16/1t", "zstd1_decode/1t");
  j["decode_mt_over_1t"] = speed_ratio("decode_codes/mt", "decode_codes/1t");
  j["decode_fp16_mt_over_1t"] = speed_ratio("decode_fp16/mt", "decode_fp16/1t");
  j["decode_fp16_into_over_zstd1_decode"] = speed_ratio("decode_fp16_into/1t", "zstd1_decode/1t");
  j["decode_fp16_into_mt_over_1t"] = speed_ratio("decode_fp16_into/mt", "decode_fp16_into/1t");
  j["encode_mt_over_1t"] = speed_ratio("encode_codes/mt", "encode_codes/1t");
  const double bits_n = 8.0 / static_cast<double>(n);
  j["lossless_bytes"] = lossless.size();
  j["lossless_bits_per_value"] = static_cast<double>(lossless.size()) * bits_n;
  j["bytesplit_zstd19_bits_per_value"] = static_cast<double>(bytesplit_z19) * bits_n;
  j["lossless_over_bytesplit_zstd19"] =
      static_cast<double>(lossless.size()) / static_cast<double>(bytesplit_z19);
  j["lossless_encode_elems_per_s"] = ips("lossless_encode/1t");
  j["lossless_decode_elems_per_s"] = ips("lossless_decode/1t");
  j["lossless_encode_mt_over_1t"] = speed_ratio("lossless_encode/mt", "lossless_encode/1t");
  j["lossless_decode_mt_over_1t"] = speed_ratio("lossless_decode/mt", "lossless_decode/1t");
  j["zstd1_fp16_encode_elems_per_s"] = ips("zstd1_fp16_encode/1t");
  j["zstd1_fp16_decode_elems_per_s"] = ips("zstd1_fp16_decode/1t");
  j["lossless_encode_over_zstd1_fp16"] = speed_ratio("lossless_encode/1t", "zstd1_fp16_encode/1t");
  j["lossless_decode_over_zstd1_fp16"] = speed_ratio("lossless_decode/1t", "zstd1_fp16_decode/1t");
  j["file_bytes"] = file.size();
  j["file_decode_elems_per_s"] = ips("file_decode/1t");
  j["file_encode_elems_per_s"] = ips("file_encode/1t");
  // Aim (issue 10): the file path within 1.3x the fused kernel's time, i.e. ratio >= 0.77.
  j["decode_values_fp16_elems_per_s"] = ips("decode_values_fp16/1t");
  j["decode_values_fp16_mt_over_1t"] =
      speed_ratio("decode_values_fp16/mt", "decode_values_fp16/1t");
  j["file_decode_over_decode_fp16"] = speed_ratio("file_decode/1t", "decode_fp16/1t");
  j["file_decode_over_decode_values_fp16"] = speed_ratio("file_decode/1t", "decode_values_fp16/1t");
  // The same against the fused decode into a caller's buffer, as the file path decodes.
  j["decode_values_fp16_into_elems_per_s"] = ips("decode_values_fp16_into/1t");
  j["file_decode_over_decode_values_fp16_into"] =
      speed_ratio("file_decode/1t", "decode_values_fp16_into/1t");
  j["file_encode_over_encode_fp16"] = speed_ratio("file_encode/1t", "encode_fp16/1t");
  if (!parts.batches.empty()) {
    j["file_parts_decode_elems_per_s"] = ips("file_parts_decode/1t");
    j["file_decode_over_parts_decode"] = speed_ratio("file_decode/1t", "file_parts_decode/1t");
  }
  if (!part_heads.empty()) {
    j["file_parts_encode_elems_per_s"] = ips("file_parts_encode/1t");
    j["file_encode_over_parts_encode"] = speed_ratio("file_encode/1t", "file_parts_encode/1t");
  }
  if (!short_chunks.empty()) {
    j["file_decode_chunks64_elems_per_s"] = ips("file_decode_chunks64/1t");
    j["file_decode_chunks64_over_file_decode"] =
        speed_ratio("file_decode_chunks64/1t", "file_decode/1t");
    j["file_encode_chunks64_elems_per_s"] = ips("file_encode_chunks64/1t");
    j["file_encode_chunks64_over_file_encode"] =
        speed_ratio("file_encode_chunks64/1t", "file_encode/1t");
  }
  j["file_decode_mt_over_1t"] = speed_ratio("file_decode/mt", "file_decode/1t");
  j["file_encode_mt_over_1t"] = speed_ratio("file_encode/mt", "file_encode/1t");
  if (!level_file.empty()) {
    j["file_level_bytes"] = level_file.size();
    j["file_level_decode_elems_per_s"] = ips("file_decode_level/1t");
    j["file_level_encode_elems_per_s"] = ips("file_encode_level/1t");
    j["file_level_encode_mt_over_1t"] = speed_ratio("file_encode_level/mt", "file_encode_level/1t");
    j["file_level_decode_over_decode_values_fp16"] =
        speed_ratio("file_decode_level/1t", "decode_values_fp16/1t");
    j["file_level_parts_decode_elems_per_s"] = ips("file_level_parts_decode/1t");
    j["file_level_decode_over_parts_decode"] =
        speed_ratio("file_decode_level/1t", "file_level_parts_decode/1t");
  }
  if (profile) {
    // Aim (issue 9): the transform path within 2x of the quantized file path's time.
    j["transform_bytes"] = transform.size();
    j["transform_decode_elems_per_s"] = ips("transform_decode/1t");
    j["transform_encode_elems_per_s"] = ips("transform_encode/1t");
    j["transform_decode_over_file_decode"] = speed_ratio("transform_decode/1t", "file_decode/1t");
    j["transform_encode_over_file_encode"] = speed_ratio("transform_encode/1t", "file_encode/1t");
  }
  j["coded_param_bytes"] = batch_report.param_bytes;
  j["coded_model_bytes"] = batch_report.model_bytes;
  if (o.json) {
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("\ninput: %s, %zu elements, %d bits, path %s, %zu threads, best of %d runs\n",
              in.source.c_str(), n, o.bits, simd_path_name(simd_path()), all_threads,
              std::max(1, o.repetitions));
  std::printf(
      "sizes: coded %zu (fp32 params), %zu (encode_values, compact params), codes only %zu\n"
      "       fixed %zu  zstd-1 %zu  zstd-19 %zu (codes only)  codes-only/zstd19 %.3f\n",
      coded.size(), coded_values.size(), code_payload, fixed, z1.size(), z19.size(),
      j["coded_codes_only_over_zstd19"].get<double>());
  std::printf("       codes only = coded %zu - parameters %zu (models %zu, payloads %zu)\n",
              coded.size(), batch_report.param_bytes, batch_report.model_bytes,
              batch_report.payload_bytes);
  std::printf(
      "size ratios: codes-only / zstd-19 %.3f (aim <= 0.85), coded (fp32 params) / "
      "(zstd-19 + fp32 params) %.3f\n",
      j["coded_codes_only_over_zstd19"].get<double>(),
      static_cast<double>(coded.size()) / static_cast<double>(z19.size() + 2 * raw_params));
  std::printf("lossless: %.3f bits/value, byte-split zstd -19 %.3f (ratio %.4f, aim <= 0.95)\n",
              j["lossless_bits_per_value"].get<double>(),
              j["bytesplit_zstd19_bits_per_value"].get<double>(),
              j["lossless_over_bytesplit_zstd19"].get<double>());
  const std::string mt = std::to_string(all_threads) + " threads vs 1";
  print_comparisons(
      r,
      {{"decode fp16 vs zstd -1 decode", "decode_fp16/1t", "zstd1_decode/1t"},
       {"decode fp16 into a buffer vs zstd -1 decode", "decode_fp16_into/1t", "zstd1_decode/1t"},
       {"decode codes vs zstd -1 decode", "decode_codes/1t", "zstd1_decode/1t"},
       {"encode codes vs zstd -1 encode", "encode_codes/1t", "zstd1_encode/1t"},
       {"encode fp16 vs zstd -1 encode", "encode_fp16/1t", "zstd1_encode/1t"},
       {"decode codes vs memcpy", "decode_codes/1t", "memcpy_codes/1t"},
       {"decode codes " + mt, "decode_codes/mt", "decode_codes/1t"},
       {"decode fp16 " + mt, "decode_fp16/mt", "decode_fp16/1t"},
       {"decode fp16 into a buffer " + mt, "decode_fp16_into/mt", "decode_fp16_into/1t"},
       {"decode fp16, compact params " + mt, "decode_values_fp16/mt", "decode_values_fp16/1t"},
       {"encode codes " + mt, "encode_codes/mt", "encode_codes/1t"},
       {"file decode (.cgkv) vs fused decode fp16", "file_decode/1t", "decode_fp16/1t"},
       {"file decode vs fused decode, compact params", "file_decode/1t", "decode_values_fp16/1t"},
       {"file decode vs fused decode into a buffer, compact params", "file_decode/1t",
        "decode_values_fp16_into/1t"},
       {"file encode (.cgkv) vs fused encode fp16", "file_encode/1t", "encode_fp16/1t"},
       {"file decode " + mt, "file_decode/mt", "file_decode/1t"},
       {"file decode vs its own tensors' fused decode", "file_decode/1t", "file_parts_decode/1t"},
       {"file encode vs its own tensors' fused encode", "file_encode/1t", "file_parts_encode/1t"},
       {"level high file decode (pre-RoPE keys) vs fused decode, compact params",
        "file_decode_level/1t", "decode_values_fp16/1t"},
       {"level high file decode vs its own tensors' fused decode", "file_decode_level/1t",
        "file_level_parts_decode/1t"},
       {"transform file decode vs quantized file decode", "transform_decode/1t", "file_decode/1t"},
       {"transform file encode vs quantized file encode", "transform_encode/1t", "file_encode/1t"},
       {"lossless encode vs zstd -1 (fp16)", "lossless_encode/1t", "zstd1_fp16_encode/1t"},
       {"lossless decode vs zstd -1 (fp16)", "lossless_decode/1t", "zstd1_fp16_decode/1t"},
       {"lossless encode " + mt, "lossless_encode/mt", "lossless_encode/1t"},
       {"lossless decode " + mt, "lossless_decode/mt", "lossless_decode/1t"}});
  return 0;
}

}  // namespace cachegen::bench
