// `cachegen encode | decode | inspect | verify`: .npy KV arrays <-> .cgkv containers, in files
// or in a store (--store file://DIR | redis://HOST:PORT[/DB]; the file argument is the key).
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cachegen/container.h"
#include "cachegen/kv_cache.h"
#include "cachegen/transform.h"
#include "commands.h"
#include "kv_io.h"

namespace cachegen::cli {
namespace {

struct EncodeOptions {
  std::string input, output, store;
  int bits = 4, layer_groups = 3;
  size_t group_size = 32, chunk_tokens = 0;  // 0: 256 (quantized), 1024 (lossless)
  std::string params = "compact";
  std::string
      level;  // high | medium | low (| lossless): replaces --bits/--layer-groups/--group-size
  float rope_base = 0;  // > 0: keys are quantized pre-RoPE with these parameters
  int rope_dims = 0;
  float rope_scale = 1;
  bool rope_neox = false;
  bool lossless = false;
};

// The quality level's configuration for a .npy (no model: recomputed layers are stored).
KVCacheConfig npy_level_config(const EncodeOptions& o, const ModelShape& shape) {
  QualityLevel level = QualityLevel::high;
  bool found = false;
  for (QualityLevel l : {QualityLevel::high, QualityLevel::medium, QualityLevel::low}) {
    if (o.level == quality_level_name(l)) level = l, found = true;
  }
  if (!found)
    throw Error(ErrorCode::invalid_argument, "--level must be lossless, high, medium or low");
  RopeParams rope;
  rope.freq_base = o.rope_base;
  rope.freq_scale = o.rope_scale;
  rope.n_rot = o.rope_dims;
  rope.neox = o.rope_neox;
  if (o.rope_base <= 0) {
    std::fprintf(stderr,
                 "note: no --rope-base: keys are quantized as given (the level's pre-RoPE "
                 "keys need the model's RoPE parameters)\n");
  }
  return quality_level_config_stored(level, shape, o.rope_base > 0 ? &rope : nullptr);
}

KVDType npy_kv_dtype(const NpyArray& a, const std::string& path) {
  switch (a.dtype) {
    case NpyDType::f16:
      return KVDType::f16;
    case NpyDType::bf16:
      return KVDType::bf16;
    case NpyDType::f32:
      return KVDType::f32;
    default:  // a well-formed file this command does not take: unsupported input (exit 4)
      throw Error(ErrorCode::corrupt_input, path + ": unsupported dtype " + npy_descr(a.dtype) +
                                                "; KV arrays must be float16, bfloat16 or float32");
  }
}

// The .npy's shape as a model shape. The shape comes from the file, so an impossible one is
// unsupported input (exit 4), named by axis; checked before any cast narrows a dimension.
ModelShape npy_model_shape(const NpyArray& a, const std::string& path) {
  if (a.shape.size() != 5 || a.shape[1] != 2) {
    throw Error(ErrorCode::corrupt_input,
                path + ": expected shape [n_layers, 2, n_tokens, n_kv_heads, head_dim]");
  }
  const struct {
    size_t axis, max;
    const char* name;
  } limits[] = {{0, 4096, "n_layers"},
                {2, size_t{1} << 40, "n_tokens"},
                {3, 65536, "n_kv_heads"},
                {4, 65536, "head_dim"}};
  for (const auto& l : limits) {
    if (a.shape[l.axis] > l.max || (l.axis != 2 && a.shape[l.axis] == 0)) {
      throw Error(ErrorCode::corrupt_input, path + ": shape[" + std::to_string(l.axis) + "] (" +
                                                l.name + ") = " + std::to_string(a.shape[l.axis]) +
                                                " is outside " + (l.axis == 2 ? "0" : "1") + ".." +
                                                std::to_string(l.max));
    }
  }
  ModelShape shape;
  shape.architecture = "npy";
  shape.n_layers = static_cast<int>(a.shape[0]);
  shape.n_kv_heads = static_cast<int>(a.shape[3]);
  shape.head_dim = static_cast<int>(a.shape[4]);
  shape.validate();
  return shape;
}

// The library names KVCacheConfig fields; a CLI user typed options. Rewrites the names of the
// fields the CLI sets from its options.
Error with_option_names(const Error& e) {
  std::string m = e.message();
  const std::pair<const char*, const char*> names[] = {{"config.block_tokens", "--chunk-tokens"},
                                                       {"config.group_size", "--group-size"},
                                                       {"group_size", "--group-size"},
                                                       {"config.base_bits", "--bits"},
                                                       {"config.layer_groups", "--layer-groups"}};
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

void run_encode(const EncodeOptions& o) {
  if (o.rope_base != 0 || o.rope_scale != 1) {  // NaN included: it compares unequal
    RopeParams rope;
    rope.freq_base = o.rope_base;
    rope.freq_scale = o.rope_scale;
    rope.n_rot = o.rope_dims;
    const std::string problem = rope.problem();
    if (!problem.empty())
      throw Error(ErrorCode::invalid_argument, "--rope-base/--rope-scale: " + problem);
  }
  const NpyArray a = read_npy(o.input);
  const ModelShape shape = npy_model_shape(a, o.input);
  const KVDType dtype = npy_kv_dtype(a, o.input);
  const size_t T = a.shape[2], H = a.shape[3], D = a.shape[4];
  const size_t esize = npy_dtype_size(a.dtype), plane = T * H * D * esize;
  std::vector<uint8_t> file;
  const bool lossless = o.lossless || o.level == "lossless";
  if (lossless) {
    if (a.dtype != NpyDType::f16)
      throw Error(ErrorCode::invalid_argument, "--lossless needs a float16 array");
    const auto kv = a.as<Half>();
    // Longer chunks find more repeated rows (as CgkvLevel::exact's 1024).
    file = write_cgkv_lossless(shape, kv, T, o.chunk_tokens ? o.chunk_tokens : 1024);
  } else {
    KVCacheConfig cfg;
    if (!o.level.empty()) {
      cfg = npy_level_config(o, shape);
    } else {
      cfg.base_bits = o.bits;
      cfg.layer_groups = o.layer_groups;
      cfg.group_size = o.group_size;
      cfg.block_tokens = o.chunk_tokens ? o.chunk_tokens : 256;
    }
    if (o.params == "reference")
      cfg.params = ParamMode::reference;
    else if (o.params != "compact")
      throw Error(ErrorCode::invalid_argument, "--params must be compact or reference");
    KVCache cache = [&] {
      try {
        return KVCacheBuilder::for_model(shape, cfg);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::invalid_argument) throw;
        throw with_option_names(e);
      }
    }();
    Progress progress("encoding", shape.n_layers * T);
    for (size_t l = 0; l < cache.layers.size(); ++l) {
      // Feed one block at a time: the progress bar moves, the result is the same (results
      // do not depend on how tokens arrive).
      for (size_t t = 0; t < T; t += cfg.block_tokens) {
        const size_t n = std::min(cfg.block_tokens, T - t);
        const uint8_t* base = a.data.data() + 2 * l * plane + t * H * D * esize;
        cache.layers[l].append({base, dtype, H, n, D, true}, {base + plane, dtype, H, n, D, true});
        progress.update(l * T + t + n);
      }
    }
    file = write_cgkv(cache);
  }
  save_output(o.output, o.store, file);
  const double fp16 = 2.0 * static_cast<double>(a.size());
  std::fprintf(stderr, "%s: %zu bytes (%.3f bits/element, %.2fx smaller than fp16)\n",
               o.output.c_str(), file.size(),
               8.0 * static_cast<double>(file.size()) / static_cast<double>(a.size()),
               fp16 / static_cast<double>(file.size()));
}

struct DecodeOptions {
  std::string input, output, store, tokens;
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

CgkvReader open_reader(const std::string& name, const std::string& store) {
  return store.empty() ? CgkvReader::open_file(name)
                       : CgkvReader::from_bytes(load_input(name, store));
}

void run_decode(const DecodeOptions& o) {
  const CgkvReader r = open_reader(o.input, o.store);
  const CgkvInfo& info = r.info();
  size_t a, b;
  parse_range(o.tokens, info.n_tokens, a, b);
  const std::vector<Half> kv = r.read_tokens(a, b);
  NpyArray out;
  out.dtype = NpyDType::f16;
  out.shape = {static_cast<size_t>(info.n_attention_layers()), 2, b - a,
               static_cast<size_t>(info.n_kv_heads), static_cast<size_t>(info.head_dim)};
  out.data.resize(kv.size() * 2);
  if (!kv.empty()) std::memcpy(out.data.data(), kv.data(), out.data.size());
  write_npy(o.output, out);
}

struct InspectOptions {
  std::string input, store;
  bool json = false;
};

void run_inspect(const InspectOptions& o) {
  const CgkvReader r = open_reader(o.input, o.store);
  const CgkvInfo& info = r.info();
  // Per-tensor bytes, from the chunk payloads' framing (every chunk checksum checked).
  const size_t n_attn = static_cast<size_t>(info.n_attention_layers());
  std::vector<size_t> bytes(n_attn * 2, 0);
  for (size_t c = 0; c < info.chunks.size(); ++c) {
    const std::vector<uint64_t> sizes = r.chunk_tensor_bytes(c);
    for (size_t t = 0; t < sizes.size(); ++t) bytes[t] += sizes[t];
  }
  for (size_t b = 0; b < info.blobs.size(); ++b) r.read_blob_at(b);  // every blob's checksum
  const size_t per_tensor =
      info.n_tokens * static_cast<size_t>(info.n_kv_heads) * static_cast<size_t>(info.head_dim);
  const double fp16_total = 2.0 * static_cast<double>(per_tensor) * 2 * static_cast<double>(n_attn);
  nlohmann::json j;
  j["file_bytes"] = info.file_bytes;
  j["header_bytes"] = info.header_bytes;
  j["codec"] = info.codec == ContainerCodec::quantized ? "quantized" : "lossless_fp16";
  j["n_layers"] = info.n_layers;
  j["n_kv_heads"] = info.n_kv_heads;
  j["head_dim"] = info.head_dim;
  j["n_tokens"] = info.n_tokens;
  j["group_size"] = info.group_size;
  j["chunk_tokens"] = info.chunk_tokens;
  j["n_chunks"] = info.chunks.size();
  if (info.has_rope) {
    j["rope"] = {{"freq_base", info.rope.freq_base},
                 {"freq_scale", info.rope.freq_scale},
                 {"n_rot", info.rope.n_rot},
                 {"neox", info.rope.neox},
                 {"position_offset", info.rope_position_offset}};
  }
  j["bits_per_element"] =
      per_tensor ? 8.0 * static_cast<double>(info.file_bytes) /
                       (static_cast<double>(per_tensor) * 2 * static_cast<double>(n_attn))
                 : 0.0;
  j["ratio_vs_fp16"] = info.file_bytes ? fp16_total / static_cast<double>(info.file_bytes) : 0.0;
  // What inspect checked (every chunk and blob checksum, the tensor lengths); verify decodes.
  j["checked"] = "checksums";
  j["layers"] = nlohmann::json::array();
  size_t t = 0;
  for (size_t l = 0; l < info.layers.size(); ++l) {
    const CgkvLayerInfo& li = info.layers[l];
    nlohmann::json lj = {{"layer", l}, {"attention", li.attention}};
    if (li.attention) {
      const size_t kb = bytes[t], vb = bytes[t + 1];
      t += 2;
      lj["key_bits"] = li.key_bits;
      lj["value_bits"] = li.value_bits;
      lj["recomputed"] = li.recomputed;
      lj["key_pre_rope"] = li.key_transform == KeyTransform::pre_rope;
      lj["key_bytes"] = kb;
      lj["value_bytes"] = vb;
      lj["key_bits_per_element"] =
          per_tensor ? 8.0 * static_cast<double>(kb) / static_cast<double>(per_tensor) : 0.0;
      lj["value_bits_per_element"] =
          per_tensor ? 8.0 * static_cast<double>(vb) / static_cast<double>(per_tensor) : 0.0;
      if (li.key_bits > 0) {
        const double fixed =
            static_cast<double>(per_tensor) * (li.key_bits + 1);  // + fp16 scale/zero per 32
        lj["key_savings_vs_fixed"] = fixed > 0 ? 1.0 - 8.0 * static_cast<double>(kb) / fixed : 0.0;
      }
    }
    j["layers"].push_back(lj);
  }
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf(
      "%s: %s, %d layers x %d KV heads x %d dims, %zu tokens, group %zu, %zu chunks of %zu "
      "tokens\n",
      o.input.c_str(), j["codec"].get<std::string>().c_str(), info.n_layers, info.n_kv_heads,
      info.head_dim, info.n_tokens, info.group_size, info.chunks.size(), info.chunk_tokens);
  std::printf("%5s %6s %6s %12s %12s %10s %10s\n", "layer", "K bits", "V bits", "K bytes",
              "V bytes", "K bits/el", "V bits/el");
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
    std::printf("%5zu %6d %6d %12zu %12zu %10.3f %10.3f%s\n", lj["layer"].get<size_t>(),
                lj["key_bits"].get<int>(), lj["value_bits"].get<int>(),
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

void add_kv_commands(CLI::App& app) {
  auto enc = std::make_shared<EncodeOptions>();
  CLI::App* e = app.add_subcommand(
      "encode", "compress a KV .npy [n_layers, 2, n_tokens, n_kv_heads, head_dim] into .cgkv");
  e->add_option("input", enc->input, "KV array (.npy; float16, bfloat16 or float32)")->required();
  e->add_option("-o,--output", enc->output, "output .cgkv file (or key, with --store)")->required();
  e->add_option("--bits", enc->bits,
                "bits of the shallowest layers (deeper layer groups get fewer)")
      ->check(CLI::Range(1, 8));
  e->add_option("--layer-groups", enc->layer_groups, "layer groups of the bit schedule")
      ->check(CLI::Range(1, 4096));
  e->add_option("--group-size", enc->group_size, "tokens per quantization group")
      ->check(CLI::Range(1, 65536));
  e->add_option("--chunk-tokens", enc->chunk_tokens,
                "tokens per chunk (a multiple of --group-size; default 256, lossless 1024)");
  e->add_option("--params", enc->params,
                "compact (default) or reference (bit-exact reference quantizer)");
  e->add_flag("--lossless", enc->lossless,
              "store the exact fp16 values (repeated rows by reference, rANS high bytes)");
  e->add_option("--level", enc->level,
                "quality level lossless|high|medium|low (docs/QUALITY_LEVELS.md); replaces "
                "--bits/--layer-groups/--group-size/--chunk-tokens");
  e->add_option("--rope-base", enc->rope_base,
                "RoPE freq_base: quantize keys pre-RoPE (with --level)");
  e->add_option("--rope-dims", enc->rope_dims, "RoPE rotated dims per head (default head_dim)");
  e->add_option("--rope-scale", enc->rope_scale, "RoPE linear frequency scale");
  e->add_flag("--rope-neox", enc->rope_neox,
              "RoPE NEOX pairing (i, i + n/2) instead of (i, i + 1)");
  e->add_option("--store", enc->store, "put into a store: file://DIR or redis://HOST:PORT[/DB]");
  e->callback([enc] { run_encode(*enc); });

  auto dec = std::make_shared<DecodeOptions>();
  CLI::App* d = app.add_subcommand("decode", "decompress .cgkv into a float16 .npy");
  d->add_option("input", dec->input, ".cgkv file (or key, with --store)")->required();
  d->add_option("-o,--output", dec->output, "output .npy")->required();
  d->add_option("--tokens", dec->tokens, "token range A:B (reads only the chunks it needs)");
  d->add_option("--store", dec->store, "read from a store: file://DIR or redis://HOST:PORT[/DB]");
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
  v->callback([ver] {
    const CgkvReader r = open_reader(ver->input, ver->store);
    r.verify();
    std::printf("%s: OK (%zu chunks, %zu tokens, %llu bytes)\n", ver->input.c_str(),
                r.info().chunks.size(), r.info().n_tokens,
                static_cast<unsigned long long>(r.info().file_bytes));
  });
}

}  // namespace cachegen::cli
