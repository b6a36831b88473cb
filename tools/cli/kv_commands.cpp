// `cachegen encode | decode | inspect | verify`: .npy KV arrays <-> .cgkv containers, in files
// or in a store (--store file://DIR | redis://HOST:PORT[/DB]; the file argument is the key).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cachegen/container.h"
#include "cachegen/encode.h"
#include "cachegen/kv_cache.h"
#include "cachegen/profile.h"
#include "cachegen/transform.h"
#include "commands.h"
#include "kv_io.h"

namespace cachegen::cli {
namespace {

struct EncodeOptions {
  std::string input, output, store, profile;
  KVEncodeOptions kv;  // the library's options, defaults included
};

// The profile of --profile (none when empty).
std::shared_ptr<const KvProfile> load_profile(const std::string& path) {
  if (path.empty()) return nullptr;
  return std::make_shared<const KvProfile>(read_profile(path));
}

KVDType npy_kv_dtype(NpyDType dtype, const std::string& path) {
  switch (dtype) {
    case NpyDType::f16:
      return KVDType::f16;
    case NpyDType::bf16:
      return KVDType::bf16;
    case NpyDType::f32:
      return KVDType::f32;
    default:  // a well-formed file this command does not take: unsupported input (exit 4)
      throw Error(ErrorCode::corrupt_input, path + ": unsupported dtype " + npy_descr(dtype) +
                                                "; KV arrays must be float16, bfloat16 or float32");
  }
}

// The library names KVCacheConfig fields; a CLI user typed options. Rewrites the names of the
// fields the CLI sets from its options.
Error with_option_names(const Error& e) {
  std::string m = e.message();
  const std::pair<const char*, const char*> names[] = {
      {"options.level", "--level"},           {"options.params", "--params"},
      {"options.lossless", "--lossless"},     {"options.rope_base", "--rope-base"},
      {"options.rope_scale", "--rope-scale"}, {"config.block_tokens", "--chunk-tokens"},
      {"config.group_size", "--group-size"},  {"group_size", "--group-size"},
      {"config.base_bits", "--bits"},         {"config.layer_groups", "--layer-groups"}};
  for (const auto& [field, option] : names) {
    for (size_t at = m.find(field); at != std::string::npos; at = m.find(field, at)) {
      const bool inside = at > 0 && (m[at - 1] == '.' || m[at - 1] == '-');
      if (inside) {
        at += std::strlen(field);
        continue;
      }
      m.replace(at, std::strlen(field), option);
      at += std::strlen(option);
    }
  }
  return Error(e.code(), m);
}

// f(), its invalid_argument errors naming the CLI's options.
template <typename F>
auto named_options(F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument) throw;
    throw with_option_names(e);
  }
}

void run_encode(const EncodeOptions& o) {
  // Mapped, not read: the array is read once, from the page cache (main() turns a SIGBUS from
  // the file's truncation meanwhile into an I/O error).
  const MappedNpy a = MappedNpy::open(o.input);
  const ModelShape shape = kv_array_model_shape(a.shape, ErrorCode::corrupt_input, o.input);
  KVArrayView kv;
  kv.dtype = npy_kv_dtype(a.dtype, o.input);
  kv.n_tokens = a.shape[2];
  kv.n_kv_heads = a.shape[3];
  kv.head_dim = a.shape[4];
  const size_t layer_bytes =
      2 * kv.n_tokens * kv.n_kv_heads * kv.head_dim * npy_dtype_size(a.dtype);
  for (size_t l = 0; l < a.shape[0]; ++l) kv.layers.push_back(a.data().data() + l * layer_bytes);
  KVEncodeOptions options = o.kv;
  options.profile = load_profile(o.profile);
  if (!options.profile && !o.kv.level.empty() && !o.kv.is_lossless() && o.kv.rope_base <= 0) {
    std::fprintf(stderr,
                 "note: no --rope-base: keys are quantized as given (the level's pre-RoPE "
                 "keys need the model's RoPE parameters)\n");
  }
  Progress progress("encoding", shape.n_layers * kv.n_tokens);
  const auto on_progress = [&](size_t done, size_t) { progress.update(done); };
  uint64_t size = 0;
  if (o.store.empty()) {  // streamed into the file: never a second copy of it in memory
    size = write_output_file(o.output, [&](const CgkvWriteAt& out) {
      return named_options(
          [&] { return encode_kv_array(out, kv, shape, options, {}, on_progress); });
    });
  } else {  // a store's value is put whole
    const std::vector<uint8_t> file =
        named_options([&] { return encode_kv_array(kv, shape, options, {}, on_progress); });
    save_output(o.output, o.store, file);
    size = file.size();
  }
  const double fp16 = 2.0 * static_cast<double>(a.size());
  std::fprintf(stderr, "%s: %llu bytes (%.3f bits/element, %.2fx smaller than fp16)\n",
               o.output.c_str(), static_cast<unsigned long long>(size),
               8.0 * static_cast<double>(size) / static_cast<double>(a.size()),
               fp16 / static_cast<double>(size));
}

struct DecodeOptions {
  std::string input, output, store, tokens, profile;
};

// A strict decimal (digits only: no sign, space, base prefix or suffix), or false.
bool parse_decimal(std::string_view s, size_t& out) {
  if (s.empty() || s.size() > 19) return false;
  out = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return false;
    out = out * 10 + static_cast<size_t>(ch - '0');
  }
  return true;
}

// --tokens A:B, either end optional (A defaults to 0, B to n). A == B is an empty range: the
// output holds 0 tokens.
void parse_range(const std::string& s, size_t n, size_t& a, size_t& b) {
  a = 0;
  b = n;
  if (s.empty()) return;
  const size_t colon = s.find(':');
  const std::string_view lo = std::string_view(s).substr(0, colon);
  const std::string_view hi =
      colon == std::string::npos ? std::string_view() : std::string_view(s).substr(colon + 1);
  if (colon == std::string::npos || (!lo.empty() && !parse_decimal(lo, a)) ||
      (!hi.empty() && !parse_decimal(hi, b))) {
    throw Error(ErrorCode::invalid_argument,
                "--tokens '" + s + "' is not A:B with decimal token indices");
  }
  if (a > b || b > n) {
    throw Error(ErrorCode::invalid_argument,
                "--tokens " + s + " is outside 0:" + std::to_string(n));
  }
}

CgkvReader open_reader(const std::string& name, const std::string& store,
                       const std::string& profile = "") {
  // A file is mapped (main() turns a SIGBUS from its truncation meanwhile into an I/O error).
  CgkvReader r =
      store.empty() ? CgkvReader::map_file(name) : CgkvReader::from_bytes(load_input(name, store));
  r.set_profile(load_profile(profile));
  return r;
}

// Writes tokens [a, b) as an fp16 .npy [layers, 2, b - a, heads, dim] through OutputFile:
// windows of whole chunks, about 32 MiB of output each (at least one chunk), each decoded and
// written at its place, so memory holds two windows, never the whole output. A window is
// written on a thread of its own while the next one decodes (written after it, the 7B-shaped
// decode's 128 MiB of writes added ~50 ms to its ~65 ms of decoding: docs/PERFORMANCE.md, "At
// scale").
void run_decode(const DecodeOptions& o) {
  const CgkvReader r = open_reader(o.input, o.store, o.profile);
  const CgkvInfo& info = r.info();
  size_t a, b;
  parse_range(o.tokens, info.n_tokens, a, b);
  const size_t row = static_cast<size_t>(info.n_kv_heads) * static_cast<size_t>(info.head_dim);
  const size_t n_tensors = static_cast<size_t>(info.n_attention_layers()) * 2, T = b - a;
  const std::vector<size_t> shape = {n_tensors / 2, 2, T, static_cast<size_t>(info.n_kv_heads),
                                     static_cast<size_t>(info.head_dim)};
  const std::vector<uint8_t> header = npy_header(NpyDType::f16, shape);
  OutputFile out(o.output);
  out.write_at(0, header);
  constexpr size_t kWindowBytes = size_t{32} << 20;
  const size_t ct = info.chunk_tokens;  // > 0: the header checks it
  size_t chunk_bytes, span;
  if (__builtin_mul_overflow(n_tensors * row * 2, ct, &chunk_bytes)) chunk_bytes = SIZE_MAX;
  const size_t chunks_per_window =
      std::max<size_t>(1, kWindowBytes / std::max<size_t>(1, chunk_bytes));
  // Two windows' buffers, each reused (touching fresh pages cost a quarter), and never filled
  // before the decoder writes every value (a vector's resize filled 128 MiB 2 bytes at a time:
  // 14% of a lossless decode).
  struct Window {
    std::unique_ptr<Half[]> kv;
    size_t size = 0;
  } windows[2];
  std::future<void> writing;  // the previous window's writes (waited for when dropped)
  for (size_t t0 = a, k = 0; t0 < b; ++k) {
    const size_t start = t0 / ct * ct;  // a window starts at t0's chunk
    const size_t t1 = __builtin_mul_overflow(ct, chunks_per_window, &span) || span >= b - start
                          ? b
                          : start + span;
    const size_t n = r.read_elements(t0, t1);
    Window& w = windows[k % 2];  // not the window being written
    if (n > w.size) {
      w.kv.reset();  // the old buffer freed before the larger one is taken
      w.kv = std::make_unique_for_overwrite<Half[]>(n);
      w.size = n;
    }
    r.read_tokens_into(t0, t1, {w.kv.get(), n});
    if (writing.valid()) writing.get();  // its errors are this command's
    writing = std::async(std::launch::async, [&out, &header, &w, row, n_tensors, T, a, t0, t1] {
      const size_t tokens = t1 - t0;
      for (size_t t = 0; t < n_tensors; ++t) {
        const auto* p = reinterpret_cast<const uint8_t*>(w.kv.get() + t * tokens * row);
        out.write_at(header.size() + ((t * T) + (t0 - a)) * row * 2,
                     std::span<const uint8_t>(p, tokens * row * 2));
      }
    });
    t0 = t1;
  }
  if (writing.valid()) writing.get();
  out.commit();
}

struct InspectOptions {
  std::string input, store, profile;
  bool json = false;
};

void run_inspect(const InspectOptions& o) {
  const CgkvReader r = open_reader(o.input, o.store);
  const CgkvInfo& info = r.info();
  const std::string text = cgkv_inspect_json(r);
  if (o.json) {
    std::printf("%s\n", text.c_str());
    return;
  }
  const nlohmann::json j = nlohmann::json::parse(text);
  std::printf(
      "%s: %s, %d layers x %d KV heads x %d dims, %zu tokens, group %zu, %zu chunks of %zu "
      "tokens\n",
      o.input.c_str(), j["codec"].get<std::string>().c_str(), info.n_layers, info.n_kv_heads,
      info.head_dim, info.n_tokens, info.group_size, info.chunks.size(), info.chunk_tokens);
  const bool transform = info.codec == ContainerCodec::transform;
  if (transform) {
    std::printf("profile %s (decoding needs it: --profile), sinks %u tokens at %g x the step\n",
                j["profile_id"].get<std::string>().c_str(), info.sink_tokens, info.sink_scale);
  }
  std::printf("%5s %8s %8s %12s %12s %10s %10s\n", "layer", transform ? "K step" : "K bits",
              transform ? "V step" : "V bits", "K bytes", "V bytes", "K bits/el", "V bits/el");
  for (const auto& lj : j["layers"]) {
    if (!lj["attention"].get<bool>()) {
      std::printf("%5zu %s\n", lj["layer"].get<size_t>(), "  (no attention)");
      continue;
    }
    if (lj["recomputed"].get<bool>()) {
      std::printf("%5zu %s\n", lj["layer"].get<size_t>(),
                  "  recomputed from the token ids (not stored)");
      continue;
    }
    char kq[16], vq[16];
    if (transform) {
      std::snprintf(kq, sizeof kq, "%.4g", lj["key_step"].get<double>());
      std::snprintf(vq, sizeof vq, "%.4g", lj["value_step"].get<double>());
    } else {
      std::snprintf(kq, sizeof kq, "%d", lj["key_bits"].get<int>());
      std::snprintf(vq, sizeof vq, "%d", lj["value_bits"].get<int>());
    }
    std::printf("%5zu %8s %8s %12zu %12zu %10.3f %10.3f%s\n", lj["layer"].get<size_t>(), kq, vq,
                lj["key_bytes"].get<size_t>(), lj["value_bytes"].get<size_t>(),
                lj["key_bits_per_element"].get<double>(),
                lj["value_bits_per_element"].get<double>(),
                lj["key_pre_rope"].get<bool>() ? "  (K pre-RoPE)" : "");
  }
  std::printf("total %llu bytes, %.3f bits/element, %.2fx smaller than fp16\n",
              static_cast<unsigned long long>(info.file_bytes), j["bits_per_element"].get<double>(),
              j["ratio_vs_fp16"].get<double>());
  std::printf("checked: header, chunk and blob checksums, tensor framing (verify also decodes)\n");
}

}  // namespace

void add_profile_options(CLI::App* cmd, std::string& profile, double& bits_per_element,
                         double& max_kl) {
  CLI::Option* p = cmd->add_option(
      "--profile", profile,
      "calibration profile (cachegen calibrate): write a transform file at the --level's "
      "calibrated scale, or at --bits-per-element / --max-kl");
  CLI::Option* b = cmd->add_option("--bits-per-element", bits_per_element,
                                   "with --profile: the file's size in bits per K/V element")
                       ->needs(p)
                       ->check(CLI::PositiveNumber);
  cmd->add_option("--max-kl", max_kl,
                  "with --profile: the largest mean KL the profile's sensitivities estimate")
      ->needs(p)
      ->excludes(b)
      ->check(CLI::PositiveNumber);
}

// `cachegen profile P.cgprof`: what a calibration profile holds, and its rate bounds.
void add_profile_command(CLI::App& app) {
  struct Args {
    std::string path;
    std::vector<double> kl;
    std::vector<int> skip;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "profile", "describe a calibration profile (.cgprof) and its rate-distortion bounds");
  cmd->add_option("PROFILE", a->path, "the .cgprof file")->required();
  cmd->add_option("--bound-kl", a->kl,
                  "print the water-filling rate bound (bits per K/V element) at these KLs");
  cmd->add_option("--skip-layer", a->skip,
                  "layers not stored (e.g. 0 when layer 0 is recomputed): 0 bits in the bound");
  cmd->callback([a] {
    const KvProfile p = read_profile(a->path);
    std::printf("%s: profile %016llx, model %s\n", a->path.c_str(),
                static_cast<unsigned long long>(p.id()), p.model_fingerprint.c_str());
    std::printf("%d layers x %d KV heads x %d dims, PCA blocks of %zu, keys %s\n", p.n_layers,
                p.n_kv_heads, p.head_dim, p.block, p.key_pre_rope ? "pre-RoPE" : "as given");
    std::printf("level scales: high %g, medium %g, low %g; sinks %u tokens at %g\n",
                p.level_scale[0], p.level_scale[1], p.level_scale[2], p.sink_tokens, p.sink_scale);
    for (int l = 0; l < p.n_layers; ++l) {
      if (!p.profiled[static_cast<size_t>(l)]) continue;
      std::printf("layer %d: sensitivity K %.4g V %.4g\n", l, p.tensor(l, 0).sensitivity,
                  p.tensor(l, 1).sensitivity);
    }
    std::vector<uint8_t> skip(static_cast<size_t>(p.n_layers), 0);
    for (int l : a->skip) {
      if (l < 0 || l >= p.n_layers) {
        throw Error(ErrorCode::invalid_argument,
                    "--skip-layer " + std::to_string(l) + " is not a layer of the profile");
      }
      skip[static_cast<size_t>(l)] = 1;
    }
    for (double kl : a->kl) {
      if (!(kl > 0)) throw Error(ErrorCode::invalid_argument, "--bound-kl must be > 0");
      std::printf("rate bound at KL %g: %.3f bits per K/V element\n", kl, p.rate_bound(kl, skip));
    }
  });
}

void add_kv_commands(CLI::App& app) {
  add_profile_command(app);
  auto enc = std::make_shared<EncodeOptions>();
  CLI::App* e = app.add_subcommand(
      "encode", "compress a KV .npy [n_layers, 2, n_tokens, n_kv_heads, head_dim] into .cgkv");
  e->add_option("input", enc->input, "KV array (.npy; float16, bfloat16 or float32)")->required();
  e->add_option("-o,--output", enc->output, "output .cgkv file (or key, with --store)")->required();
  e->add_option("--bits", enc->kv.bits,
                "bits of the shallowest layers (deeper layer groups get fewer)")
      ->check(CLI::Range(1, 8));
  e->add_option("--layer-groups", enc->kv.layer_groups, "layer groups of the bit schedule")
      ->check(CLI::Range(1, 4096));
  e->add_option("--group-size", enc->kv.group_size, "tokens per quantization group")
      ->check(CLI::Range(1, 65536));
  e->add_option(
      "--chunk-tokens", enc->kv.chunk_tokens,
      "tokens per chunk (a multiple of --group-size; default 256, lossless 1024, or fewer "
      "where 1024 tokens exceed 32 MiB)");
  e->add_option("--params", enc->kv.params,
                "compact (default) or reference (bit-exact reference quantizer)");
  e->add_flag("--lossless", enc->kv.lossless,
              "store the exact fp16 values (repeated rows by reference, rANS high bytes)");
  e->add_option("--level", enc->kv.level,
                "quality level lossless|high|medium|low (docs/QUALITY_LEVELS.md); replaces "
                "--bits/--layer-groups/--group-size/--chunk-tokens");
  e->add_option("--rope-base", enc->kv.rope_base,
                "RoPE freq_base: quantize keys pre-RoPE (with --level)");
  e->add_option("--rope-dims", enc->kv.rope_dims, "RoPE rotated dims per head (default head_dim)");
  e->add_option("--rope-scale", enc->kv.rope_scale, "RoPE linear frequency scale");
  e->add_flag("--rope-neox", enc->kv.rope_neox,
              "RoPE NEOX pairing (i, i + n/2) instead of (i, i + 1)");
  e->add_option("--store", enc->store, "put into a store: file://DIR or redis://HOST:PORT[/DB]");
  add_profile_options(e, enc->profile, enc->kv.bits_per_element, enc->kv.max_kl);
  e->callback([enc] { run_encode(*enc); });

  auto dec = std::make_shared<DecodeOptions>();
  CLI::App* d = app.add_subcommand("decode", "decompress .cgkv into a float16 .npy");
  d->add_option("input", dec->input, ".cgkv file (or key, with --store)")->required();
  d->add_option("-o,--output", dec->output, "output .npy")->required();
  d->add_option("--tokens", dec->tokens, "token range A:B (reads only the chunks it needs)");
  d->add_option("--store", dec->store, "read from a store: file://DIR or redis://HOST:PORT[/DB]");
  d->add_option("--profile", dec->profile, "the calibration profile a transform file needs");
  d->callback([dec] { run_decode(*dec); });

  auto ins = std::make_shared<InspectOptions>();
  CLI::App* i = app.add_subcommand("inspect", "per-layer bits and sizes of a .cgkv");
  i->add_option("input", ins->input, ".cgkv file (or key, with --store)")->required();
  i->add_flag("--json", ins->json, "print JSON");
  i->add_option("--store", ins->store, "read from a store");
  i->callback([ins] { run_inspect(*ins); });

  auto ver = std::make_shared<InspectOptions>();
  CLI::App* v = app.add_subcommand("verify", "check every checksum and decode every chunk");
  v->add_option("input", ver->input, ".cgkv file (or key, with --store)")->required();
  v->add_option("--store", ver->store, "read from a store");
  v->add_option("--profile", ver->profile, "the calibration profile a transform file needs");
  v->callback([ver] {
    const CgkvReader r = open_reader(ver->input, ver->store, ver->profile);
    r.verify();
    std::printf("%s: OK (%zu chunks, %zu tokens, %llu bytes)\n", ver->input.c_str(),
                r.info().chunks.size(), r.info().n_tokens,
                static_cast<unsigned long long>(r.info().file_bytes));
  });
}

}  // namespace cachegen::cli
