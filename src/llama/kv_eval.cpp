// `cachegen eval`: rate–quality table of KV-cache compression on a real model.
//
// Per window of prefix + n_continue + 1 tokens: prefill the prefix, capture its KV (exact), then
// for every method rebuild the state with that method's reconstruction of K and V, restore it
// into the same context, teacher-force the n_continue following tokens and compare their
// next-token distributions with those of the exact (restored, unmodified) state.
//
// Pricing: a method cachegen itself can write (a quality level, uniform or per-layer bits with
// one group size, keys pre-RoPE, layer 0 recomputed) goes through the real file path: the
// whole .cgkv that snapshot_to_cgkv writes (header, chunks, token ids, state blobs), read back
// with unpack_snapshot and restored; its bits are that file's bytes * 8 over the prefix's K+V
// elements. Exploration specs the container cannot express (Hadamard keys, other parameter
// grids, fp16 layers, separate K/V groups) keep the codec's coded bytes ("codes"). Baselines
// (KIVI, TurboQuant-style: eval_baselines.h) are priced by an exact count of their fixed-width
// layout; llama.cpp's types by their block size.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include <llama.h>

#include "cachegen/codec.h"
#include "cachegen/container.h"
#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "cachegen/quality_levels.h"
#include "cachegen/quant.h"
#include "cachegen/transform.h"
#include "llama/eval_baselines.h"
#include "llama/eval_internal.h"
#include "llama/layer0_kv.h"
#include "llama/svg_plot.h"

namespace cachegen::llama {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

enum class MethodKind { exact, reference, codec, ggml_type, kivi, turboquant, profile };

struct Method {
  std::string name;
  MethodKind kind = MethodKind::exact;
  // Per layer (reference / codec); 16 = kept as fp16, 0 = recomputed from the token ids.
  std::vector<int> k_bits, v_bits;
  int32_t ggml_type = kTypeF16;  // ggml_type methods
  bool estimate_only = false;    // reference row priced by the reference's estimate
  // Codec methods only:
  size_t k_group = 0, v_group = 0;  // 0 = EvalOptions::group_size; SIZE_MAX = whole prefix
  EncodeOptions encode;
  bool key_pre_rope = false;          // quantize keys with RoPE undone
  bool key_hadamard = false;          // ... and/or rotated by a per-head Hadamard transform
  std::optional<QualityLevel> level;  // a quality level: written as SnapshotEncoding::quality
  std::string family;                 // EvalRow::family
  // Baselines only:
  baseline::KiviOptions kivi;
  double turboquant_bits = 0;
  // Profile rows (transform files): a bits-per-element or estimated-KL target, else the
  // level's scale.
  double profile_bits = 0, profile_kl = 0;
};

struct Accum {
  double kl = 0, nll = 0, nll_exact = 0;
  size_t top1 = 0, n = 0;
  double k_bits_sum = 0, v_bits_sum = 0, est_bits_sum = 0;  // bits over all windows
  double elements = 0;                                      // K+V elements over all windows
  double file_bits_sum = 0;                                 // whole .cgkv files (file-path rows)
  double encode_ms = 0, decode_ms = 0;
  bool emulated = false;
};

std::vector<int> uniform(size_t n, int bits) {
  return std::vector<int>(n, bits);
}

std::string schedule_name(const std::vector<int>& bits) {
  std::string s;
  for (int b : bits) s += b == 16 ? "F" : b == 0 ? "R" : std::to_string(b);
  return s;
}

// "K<schedule>V<schedule>" (written with append: g++ 12 warns falsely on "lit" + string&&).
std::string kv_name(const std::vector<int>& k, const std::vector<int>& v) {
  std::string s = "K";
  s.append(schedule_name(k)).append("V").append(schedule_name(v));
  return s;
}

Method plain_method(std::string name, MethodKind kind, std::vector<int> k_bits,
                    std::vector<int> v_bits, int32_t ggml_type, bool estimate_only) {
  Method m;
  m.name = std::move(name);
  m.kind = kind;
  m.k_bits = std::move(k_bits);
  m.v_bits = std::move(v_bits);
  m.ggml_type = ggml_type;
  m.estimate_only = estimate_only;
  m.family = kind == MethodKind::ggml_type   ? "llama.cpp"
             : kind == MethodKind::reference ? "reference"
                                             : "exact";
  return m;
}

Method codec_method(std::string name, std::vector<int> k_bits, std::vector<int> v_bits) {
  Method m;
  m.name = std::move(name);
  m.kind = MethodKind::codec;
  m.k_bits = std::move(k_bits);
  m.v_bits = std::move(v_bits);
  m.family = "ours";
  return m;
}

// A quality level's settings as an eval method (row named "level-<name>").
Method level_method(QualityLevel level, size_t n_layer) {
  const QualityLevelSpec q = quality_level_spec(level, static_cast<int>(n_layer));
  Method m =
      codec_method(std::string("level-") + quality_level_name(level), q.key_bits, q.value_bits);
  m.level = level;
  m.k_group = q.key_group_size;
  m.v_group = q.value_group_size;
  m.encode = q.encode;
  m.key_pre_rope = q.key_pre_rope;
  return m;
}

// The rows of the exploration behind docs/QUALITY_LEVELS.md, chosen with $CACHEGEN_EVAL_SWEEP
// (comma-separated: layers, groups, params, transforms, schedules; "all").
// A method written as K<bits per layer>V<bits per layer>[:g<N>][:kg<N>][:vg<N>][:m<N>][:z<N>]
// [:pre][:had], bits one character per layer (F = fp16, R = recomputed, else 1..8), groups of
// N tokens (0 = the whole prefix); e.g. "KR3333VR2222:g128:pre". Empty when malformed.
std::optional<Method> parse_method(const std::string& spec, size_t n_layer) {
  const size_t colon = std::min(spec.find(':'), spec.size());
  const std::string bits = spec.substr(0, colon);
  const size_t vpos = bits.find('V');
  if (bits.empty() || bits[0] != 'K' || vpos == std::string::npos) return std::nullopt;
  const auto layer_bits = [&](const std::string& b) -> std::optional<std::vector<int>> {
    if (b.size() != n_layer) return std::nullopt;
    std::vector<int> out;
    for (char c : b) {
      if (c == 'F')
        out.push_back(16);
      else if (c == 'R')
        out.push_back(0);
      else if (c >= '1' && c <= '8')
        out.push_back(c - '0');
      else
        return std::nullopt;
    }
    return out;
  };
  const auto k = layer_bits(bits.substr(1, vpos - 1)), v = layer_bits(bits.substr(vpos + 1));
  if (!k || !v) return std::nullopt;
  Method x = codec_method(spec, *k, *v);
  std::stringstream opts(spec.substr(colon));
  std::string o;
  while (std::getline(opts, o, ':')) {
    if (o.empty()) continue;
    const auto num = [&](size_t from) {
      const size_t n = std::strtoull(o.c_str() + from, nullptr, 10);
      return n == 0 ? SIZE_MAX : n;
    };
    if (o == "pre")
      x.key_pre_rope = true;
    else if (o == "had")
      x.key_hadamard = true;
    else if (o.rfind("kg", 0) == 0)
      x.k_group = num(2);
    else if (o.rfind("vg", 0) == 0)
      x.v_group = num(2);
    else if (o[0] == 'g')
      x.k_group = x.v_group = num(1);
    else if (o[0] == 'm')
      x.encode.scale_mantissa_bits = std::atoi(o.c_str() + 1);
    else if (o[0] == 'z')
      x.encode.zero_step_log2 = std::atoi(o.c_str() + 1);
    else
      return std::nullopt;
  }
  return x;
}

void add_sweep(const std::string& sweep, size_t n_layer, std::vector<Method>& m) {
  {
    std::stringstream items(sweep);
    std::string item;
    while (std::getline(items, item, ',')) {
      if (item.empty() || item[0] != 'K') continue;
      const std::optional<Method> x = parse_method(item, n_layer);
      if (!x) throw Error(ErrorCode::invalid_argument, "eval: bad method spec '" + item + "'");
      m.push_back(*x);
    }
  }
  std::string list = ",";
  list += sweep;
  list += ",";
  const auto on = [&](const char* what) {
    std::string needle = ",";
    needle += what;
    needle += ",";
    return sweep == "all" || list.find(needle) != std::string::npos;
  };
  const int nl = static_cast<int>(n_layer);
  if (on("layers")) {
    // One layer's K (or V) at 2 bits, everything else kept: each layer's share of the damage.
    for (int l = 0; l < nl; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        std::vector<int> k = uniform(n_layer, 16), v = uniform(n_layer, 16);
        (kv == 0 ? k : v)[static_cast<size_t>(l)] = 2;
        std::string name = kv == 0 ? "K" : "V";
        name.append("2@layer").append(std::to_string(l));
        m.push_back(codec_method(name, k, v));
        if (kv == 0) {
          m.push_back(m.back());
          m.back().name += " pre-rope";
          m.back().key_pre_rope = true;
        }
      }
    }
    Method r =
        codec_method("layer0 recomputed, rest fp16", uniform(n_layer, 16), uniform(n_layer, 16));
    r.k_bits[0] = r.v_bits[0] = 0;
    m.push_back(r);
  }
  if (on("transforms")) {
    for (auto [kb, vb] : std::vector<std::pair<int, int>>{{4, 16}, {3, 16}, {2, 16}, {3, 2}}) {
      for (int t = 0; t < 4; ++t) {
        Method x = codec_method("", uniform(n_layer, kb), uniform(n_layer, vb));
        x.key_pre_rope = (t & 1) != 0;
        x.key_hadamard = (t & 2) != 0;
        x.name = kv_name(uniform(1, kb), uniform(1, vb)) + (x.key_pre_rope ? " pre-rope" : "") +
                 (x.key_hadamard ? " hadamard" : "");
        m.push_back(x);
      }
    }
  }
  if (on("groups")) {
    for (size_t g : {size_t{32}, size_t{64}, size_t{128}, SIZE_MAX}) {
      const std::string gn = g == SIZE_MAX ? "all" : std::to_string(g);
      for (auto [kb, vb] : std::vector<std::pair<int, int>>{{4, 16}, {16, 2}, {16, 3}}) {
        Method x = codec_method(kv_name(uniform(1, kb), uniform(1, vb)) + " g" + gn,
                                uniform(n_layer, kb), uniform(n_layer, vb));
        x.k_group = x.v_group = g;
        x.key_pre_rope = true;
        m.push_back(x);
      }
    }
  }
  if (on("params")) {
    for (auto [mb, zs] : std::vector<std::pair<int, int>>{{6, 4}, {4, 2}, {3, 1}, {2, 0}}) {
      Method x =
          codec_method("K4V2 g64 pre-rope m" + std::to_string(mb) + " z" + std::to_string(zs),
                       uniform(n_layer, 4), uniform(n_layer, 2));
      x.k_group = x.v_group = 64;
      x.key_pre_rope = true;
      x.encode.scale_mantissa_bits = mb;
      x.encode.zero_step_log2 = zs;
      m.push_back(x);
    }
  }
  if (on("schedules")) {
    // K/V bit schedules with layer 0 recomputed, keys pre-RoPE, groups of 64.
    const std::vector<std::pair<std::vector<int>, std::vector<int>>> sched = {
        {{0, 6, 6, 6, 6}, {0, 4, 4, 4, 4}}, {{0, 6, 6, 5, 5}, {0, 4, 4, 3, 3}},
        {{0, 5, 5, 5, 5}, {0, 4, 4, 3, 3}}, {{0, 5, 5, 5, 5}, {0, 3, 3, 3, 3}},
        {{0, 5, 5, 4, 4}, {0, 3, 3, 3, 3}}, {{0, 4, 4, 4, 4}, {0, 3, 3, 3, 3}},
        {{0, 4, 4, 4, 4}, {0, 2, 2, 2, 2}}, {{0, 4, 4, 3, 3}, {0, 2, 2, 2, 2}},
        {{0, 3, 3, 3, 3}, {0, 2, 2, 2, 2}}, {{0, 3, 3, 3, 3}, {0, 2, 2, 1, 1}},
        {{0, 3, 3, 2, 2}, {0, 2, 2, 1, 1}}, {{0, 2, 2, 2, 2}, {0, 2, 2, 1, 1}}};
    for (const auto& [k, v] : sched) {
      if (k.size() != n_layer) break;
      for (size_t g : {size_t{64}, size_t{128}}) {
        Method x = codec_method(kv_name(k, v) + " g" + std::to_string(g) + " pre-rope", k, v);
        x.k_group = x.v_group = g;
        x.key_pre_rope = true;
        m.push_back(x);
      }
    }
  }
}

// `--sweep rate`: our ladder (layer 0 recomputed, keys pre-RoPE, groups of 256 as the levels;
// uniform 1..8 bits, then the levels), KIVI at 2/3/4 bits (and 2/4 without a window),
// TurboQuant-style at 2..4 bits, and llama.cpp's q8_0/q4_0 (appended by default_methods).
std::vector<Method> rate_methods(size_t n_layer) {
  std::vector<Method> m;
  m.push_back(
      plain_method("fp16 (restored, lossless)", MethodKind::exact, {}, {}, kTypeF16, false));
  m.push_back(level_method(QualityLevel::lossless, n_layer));
  for (int b = 1; b <= 8; ++b) {
    std::vector<int> bits = uniform(n_layer, b);
    bits[0] = 0;
    Method x = codec_method(kv_name(bits, bits) + ":g256:pre", bits, bits);
    x.k_group = x.v_group = 256;
    x.key_pre_rope = true;
    m.push_back(x);
  }
  for (const QualityLevelRow& row : kQualityLevels) {
    if (row.level != QualityLevel::lossless) m.push_back(level_method(row.level, n_layer));
  }
  // KIVI as published (groups of 32, an fp16 window of recent tokens; 32 here), then its
  // cheapest form (groups of 128, no window) to reach lower rates.
  const std::vector<std::array<size_t, 3>> kivi_rows = {
      {2, 32, 32}, {3, 32, 32}, {4, 32, 32}, {2, 128, 0}, {4, 128, 0}};
  for (const std::array<size_t, 3>& k : kivi_rows) {
    Method x = plain_method("", MethodKind::kivi, {}, {}, kTypeF16, false);
    x.family = "kivi";
    x.kivi.bits = static_cast<int>(k[0]);
    x.kivi.group = k[1];
    x.kivi.residual_tokens = k[2];
    x.name = "kivi-" + std::to_string(k[0]) + "b g" + std::to_string(x.kivi.group) + " r" +
             std::to_string(x.kivi.residual_tokens);
    m.push_back(x);
  }
  for (double b : {2.0, 2.5, 3.0, 3.5, 4.0}) {
    Method x = plain_method("", MethodKind::turboquant, {}, {}, kTypeF16, false);
    x.family = "turboquant";
    x.turboquant_bits = b;
    char name[32];
    std::snprintf(name, sizeof name, "turboquant-%gb", b);
    x.name = name;
    m.push_back(x);
  }
  return m;
}

std::vector<Method> default_methods(size_t n_layer, const std::string& sweep,
                                    const std::shared_ptr<const KvProfile>& profile) {
  std::vector<Method> m;
  if (sweep == "rate") {
    m = rate_methods(n_layer);
  } else {
    m.push_back(
        plain_method("fp16 (restored, lossless)", MethodKind::exact, {}, {}, kTypeF16, false));
    for (int b : {6, 4}) {
      m.push_back(plain_method("ref-" + std::to_string(b) + "b", MethodKind::reference,
                               uniform(n_layer, b), uniform(n_layer, b), kTypeF16, false));
    }
    m.push_back(plain_method("ref-4b (reference estimate)", MethodKind::reference,
                             uniform(n_layer, 4), uniform(n_layer, 4), kTypeF16, true));
    for (int b : {8, 4, 3}) {
      m.push_back(codec_method("codec-" + std::to_string(b) + "b", uniform(n_layer, b),
                               uniform(n_layer, b)));
    }
    m.push_back(codec_method("codec-K3V2", uniform(n_layer, 3), uniform(n_layer, 2)));
    for (const QualityLevelRow& row : kQualityLevels) m.push_back(level_method(row.level, n_layer));
  }
  if (const char* env = std::getenv("CACHEGEN_EVAL_SWEEP"); env != nullptr && *env != 0) {
    add_sweep(env, n_layer, m);
  }
  if (profile) {
    // Our calibrated transform: the levels the profile calibrated, and with the rate sweep a
    // ladder of size targets.
    for (const QualityLevelRow& row : kQualityLevels) {
      if (profile->scale_of(row.level) <= 0) continue;
      Method x = plain_method(std::string("profile-") + row.name, MethodKind::profile, {}, {},
                              kTypeF16, false);
      x.family = "ours (profile)";
      x.level = row.level;
      m.push_back(x);
    }
    if (sweep == "rate") {
      const auto target = [&](const char* format, double value, bool kl) {
        char name[32];
        std::snprintf(name, sizeof name, format, value);
        Method x = plain_method(name, MethodKind::profile, {}, {}, kTypeF16, false);
        x.family = "ours (profile)";
        (kl ? x.profile_kl : x.profile_bits) = value;
        m.push_back(x);
      };
      // 1.13 and 2.43 bits: the aims' rates (4x below q4_0, 3.5x below q8_0).
      for (double b : {1.0, 1.13, 1.25, 1.5, 1.75, 2.0, 2.25, 2.43, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0}) {
        target("profile-%gb", b, false);
      }
      // KL targets: how close the profile's estimate comes to the measured KL.
      for (double kl : {1e-2, 1e-3, 1e-4, 1e-5}) target("profile-kl%g", kl, true);
    }
  }
  m.push_back(plain_method("llama.cpp q8_0", MethodKind::ggml_type, {}, {}, kTypeQ8_0, false));
  m.push_back(plain_method("llama.cpp q4_0", MethodKind::ggml_type, {}, {}, kTypeQ4_0, false));
  return m;
}

// Bits per element of llama.cpp's block types (bytes per block of 32 elements * 8 / 32).
double ggml_type_bits(int32_t type) {
  return type == kTypeQ8_0 ? 8.5 : type == kTypeQ4_0 ? 4.5 : 16;
}

// The snapshot encoding that writes a method's settings, or nullopt where the container cannot
// express them (then the row keeps codes-only pricing). `group` is the method's group, resolved.
std::optional<SnapshotEncoding> file_encoding(const Method& m, const Model& model, size_t group,
                                              size_t n_rows,
                                              const std::shared_ptr<const KvProfile>& profile) {
  if (m.kind == MethodKind::profile) {
    if (m.level) return SnapshotEncoding::profiled(profile, model, *m.level);
    SnapshotEncoding e = SnapshotEncoding::profiled(profile, model);
    e.transform->bits_per_element = m.profile_bits;
    e.transform->max_kl = m.profile_kl;
    return e;
  }
  if (m.level) return SnapshotEncoding::quality(*m.level, model);
  if (m.kind != MethodKind::codec || m.key_hadamard) return std::nullopt;
  const EncodeOptions defaults;
  if (m.encode.scale_mantissa_bits != defaults.scale_mantissa_bits ||
      m.encode.zero_step_log2 != defaults.zero_step_log2) {
    return std::nullopt;
  }
  const size_t kg = m.k_group == 0 ? group : m.k_group, vg = m.v_group == 0 ? group : m.v_group;
  if (kg != vg) return std::nullopt;
  for (size_t i = 0; i < m.k_bits.size(); ++i) {
    // Only layer 0 may be recomputed, K and V together; no fp16 layers in a quantized file.
    if ((m.k_bits[i] == 0) != (m.v_bits[i] == 0) || (m.k_bits[i] == 0 && i != 0)) {
      return std::nullopt;
    }
    if (m.k_bits[i] > 8 || m.v_bits[i] > 8) return std::nullopt;
  }
  // Explicit bits' chunking (SnapshotEncoding::bits), then the method's per-layer bits.
  SnapshotEncoding encoding =
      SnapshotEncoding::bits(8, kg == SIZE_MAX ? std::max<size_t>(n_rows, 1) : kg);
  KVCacheConfig& c = encoding.quantized;
  c.layer_bits = m.k_bits;
  c.value_layer_bits = m.v_bits;
  c.key_pre_rope = m.key_pre_rope;
  if (m.key_pre_rope) c.rope = model_rope_params(model);
  return encoding;
}

// What a window's KV needs besides the values: positions (for RoPE) and, for recomputed
// layers, layer 0 rebuilt from the token ids.
struct WindowInfo {
  std::vector<int32_t> positions;
  RopeParams rope;
  const KvLayer* recomputed_layer0 = nullptr;
};

// Replaces one [n_rows, n_embd] matrix by a method's reconstruction; returns its coded bits.
double compress_matrix(const Method& m, int bits, size_t group, std::vector<float>& x,
                       size_t n_rows, size_t n_embd, Accum& acc) {
  if (bits == 16) return 16.0 * static_cast<double>(x.size());
  std::vector<Half> rec;
  double coded_bits = 0;
  auto t0 = Clock::now();
  if (m.kind == MethodKind::reference) {
    const CodeStream s = quantize_to_codes(std::span<const float>(x), n_rows, n_embd, bits, group);
    acc.encode_ms += ms_since(t0);
    coded_bits = 8.0 * static_cast<double>(fixed_width_bytes(s));
    acc.est_bits_sum += 8.0 * static_cast<double>(entropy_coded_bytes(s));
    t0 = Clock::now();
    rec = dequant_codes(s);
    acc.decode_ms += ms_since(t0);
  } else {
    group = std::min(group, std::max<size_t>(n_rows, 1));
    const std::vector<uint8_t> bytes =
        encode_values(std::span<const float>(x), n_rows, n_embd, bits, group, m.encode);
    acc.encode_ms += ms_since(t0);
    coded_bits = 8.0 * static_cast<double>(bytes.size());
    t0 = Clock::now();
    rec = decode_to_half(bytes);
    acc.decode_ms += ms_since(t0);
  }
  for (size_t i = 0; i < x.size(); ++i) x[i] = half_to_float(rec[i]);
  return coded_bits;
}

// Keys through the method's transforms, the codec, and back.
double compress_keys(const Method& m, int bits, size_t group, std::vector<float>& k, size_t n_rows,
                     size_t k_embd, size_t head_dim, const WindowInfo& info, Accum& acc) {
  if (bits == 16 || (!m.key_pre_rope && !m.key_hadamard)) {
    return compress_matrix(m, bits, group, k, n_rows, k_embd, acc);
  }
  const size_t n_heads = k_embd / head_dim;
  const auto t0 = Clock::now();
  if (m.key_pre_rope) rope_rows(k, n_rows, n_heads, head_dim, info.positions, info.rope, true);
  if (m.key_hadamard) hadamard_heads(k, n_rows, n_heads, head_dim);
  acc.encode_ms += ms_since(t0);
  const double coded = compress_matrix(m, bits, group, k, n_rows, k_embd, acc);
  const auto t1 = Clock::now();
  if (m.key_hadamard) hadamard_heads(k, n_rows, n_heads, head_dim);
  if (m.key_pre_rope) rope_rows(k, n_rows, n_heads, head_dim, info.positions, info.rope, false);
  acc.decode_ms += ms_since(t1);
  return coded;
}

// The method's reconstruction of every layer's K and V in place.
void apply_method(const Method& m, size_t group, size_t head_dim, const WindowInfo& info,
                  const baseline::TurboQuant* tq, KvSnapshot& s, Accum& acc) {
  KvStream& stream = s.data_stream();
  const size_t n_rows = stream.cells.size();
  const auto group_of = [&](size_t g) { return g == 0 ? group : g; };
  for (size_t il = 0; il < stream.layers.size(); ++il) {
    KvLayer& layer = stream.layers[il];
    std::vector<float> k = layer_k_float(layer), v = layer_v_float(layer);
    const size_t k_embd = k_row_elements(layer), v_embd = v_row_elements(layer);
    acc.elements += static_cast<double>(k.size() + v.size());
    if (m.kind == MethodKind::ggml_type) {
      // Emulation: llama.cpp's own row quantizer and dequantizer on the captured rows.
      KvLayer q = layer;
      q.k_type = q.v_type = m.ggml_type;
      q.k_row_bytes = q.k.size() == 0 ? 0 : k_embd / 32 * (m.ggml_type == kTypeQ8_0 ? 34 : 18);
      q.v_row_bytes = v_embd / 32 * (m.ggml_type == kTypeQ8_0 ? 34 : 18);
      if (k_embd % 32 != 0 || v_embd % 32 != 0) {
        throw Error(ErrorCode::invalid_argument, "eval: rows of " + std::to_string(k_embd) +
                                                     " elements cannot be cut in blocks of 32");
      }
      q.k.assign(n_rows * q.k_row_bytes, 0);
      q.v.assign(n_rows * q.v_row_bytes, 0);
      auto t0 = Clock::now();
      set_layer_k_float(q, k);
      set_layer_v_float(q, v);
      acc.encode_ms += ms_since(t0);
      t0 = Clock::now();
      k = layer_k_float(q);
      v = layer_v_float(q);
      acc.decode_ms += ms_since(t0);
      acc.k_bits_sum += ggml_type_bits(m.ggml_type) * static_cast<double>(k.size());
      acc.v_bits_sum += ggml_type_bits(m.ggml_type) * static_cast<double>(v.size());
    } else if (m.kind == MethodKind::exact) {
      acc.k_bits_sum += 16.0 * static_cast<double>(k.size());
      acc.v_bits_sum += 16.0 * static_cast<double>(v.size());
      continue;
    } else if (m.kind == MethodKind::kivi) {
      const auto t0 = Clock::now();
      acc.k_bits_sum += baseline::kivi_roundtrip(k, n_rows, k_embd, true, m.kivi);
      acc.v_bits_sum += baseline::kivi_roundtrip(v, n_rows, v_embd, false, m.kivi);
      acc.encode_ms += ms_since(t0);
    } else if (m.kind == MethodKind::turboquant) {
      if (!tq || k_embd % head_dim != 0 || v_embd % head_dim != 0) {
        throw Error(ErrorCode::invalid_argument,
                    "eval: TurboQuant rows need rows cut in heads of head_dim");
      }
      const auto t0 = Clock::now();
      acc.k_bits_sum += tq->roundtrip(k, n_rows, k_embd / head_dim);
      acc.v_bits_sum += tq->roundtrip(v, n_rows, v_embd / head_dim);
      acc.encode_ms += ms_since(t0);
    } else {
      // Recomputed layers cost no bits: K and V come from the token ids (recompute_layer0).
      if (m.k_bits[il] == 0) k = layer_k_float(*info.recomputed_layer0);
      if (m.v_bits[il] == 0) v = layer_v_float(*info.recomputed_layer0);
      if (m.k_bits[il] != 0) {
        acc.k_bits_sum += compress_keys(m, m.k_bits[il], group_of(m.k_group), k, n_rows, k_embd,
                                        head_dim, info, acc);
      }
      if (m.v_bits[il] != 0) {
        acc.v_bits_sum +=
            compress_matrix(m, m.v_bits[il], group_of(m.v_group), v, n_rows, v_embd, acc);
      }
    }
    set_layer_k_float(layer, k);
    set_layer_v_float(layer, v);
  }
}

// Layer 0 recomputed exactly as a restore does (Model::layer0, no forward pass): a copy of
// `captured`'s layer 0 with K and V computed from the token ids and weights.
KvLayer rebuild_layer0(const Model& model, const KvSnapshot& captured, const RopeParams& rope) {
  const KvStream& st = captured.data_stream();
  std::vector<int32_t> pos;
  for (const KvCell& c : st.cells) pos.push_back(c.pos);
  std::vector<float> k, v;
  model.layer0().compute(captured.tokens, pos, rope, k, v);
  KvLayer out = st.layers.at(0);
  set_layer_k_float(out, k);
  set_layer_v_float(out, v);
  return out;
}

void score(const std::vector<float>& exact, const std::vector<float>& got, size_t n_vocab,
           std::span<const int32_t> targets, Accum& acc) {
  for (size_t t = 0; t < targets.size(); ++t) {
    const std::vector<double> p = detail::log_softmax(&exact[t * n_vocab], n_vocab);
    const std::vector<double> q = detail::log_softmax(&got[t * n_vocab], n_vocab);
    double kl = 0;
    for (size_t i = 0; i < n_vocab; ++i) kl += std::exp(p[i]) * (p[i] - q[i]);
    acc.kl += std::max(kl, 0.0);
    const auto argmax = [&](const std::vector<double>& v) {
      return std::max_element(v.begin(), v.end()) - v.begin();
    };
    acc.top1 += argmax(p) == argmax(q) ? 1 : 0;
    acc.nll -= q[static_cast<size_t>(targets[t])];
    acc.nll_exact -= p[static_cast<size_t>(targets[t])];
    acc.n += 1;
  }
}

}  // namespace

namespace detail {

std::vector<double> log_softmax(const float* logits, size_t n) {
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const double lse = static_cast<double>(mx) + std::log(sum);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(logits[i]) - lse;
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorCode::not_found, "eval: text file '" + path + "' not found");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ContextSettings window_context_settings(size_t window, bool flash_attn, int32_t n_threads) {
  ContextSettings cs;
  cs.n_ctx = static_cast<uint32_t>((window + 255) / 256 * 256);
  cs.flash_attn = flash_attn;
  cs.n_threads = n_threads;
  return cs;
}

double kl_divergence(const float* exact, const float* got, size_t n) {
  const std::vector<double> p = log_softmax(exact, n), q = log_softmax(got, n);
  double kl = 0;
  for (size_t i = 0; i < n; ++i) kl += std::exp(p[i]) * (p[i] - q[i]);
  return std::max(kl, 0.0);
}

}  // namespace detail

std::vector<EvalRow> evaluate_kv_quality(const EvalOptions& o,
                                         const std::function<void(const std::string&)>& progress) {
  if (o.n_contexts < 1 || o.prefix < 1 || o.n_continue < 1) {
    throw Error(ErrorCode::invalid_argument, "eval: --contexts, --prefix, --continue must be >= 1");
  }
  if (!o.sweep.empty() && o.sweep != "rate") {
    throw Error(ErrorCode::invalid_argument,
                "eval: --sweep '" + o.sweep + "' is not known (only 'rate')");
  }
  const Model model(o.model_path);
  const std::vector<int32_t> text = model.tokenize(detail::read_text(o.text_path), false);
  const size_t window = static_cast<size_t>(o.prefix + o.n_continue + 1);
  const size_t need = static_cast<size_t>(o.n_contexts) * (window - 1);
  if (text.size() < need) {
    throw Error(ErrorCode::invalid_argument, "eval: the text has " + std::to_string(text.size()) +
                                                 " tokens, " + std::to_string(need) + " needed");
  }
  const int32_t bos = llama_vocab_bos(llama_model_get_vocab(model.get()));
  const ContextSettings cs = detail::window_context_settings(window, o.flash_attn, o.n_threads);
  Context ctx(model, cs);

  const size_t n_layer = model.identity().n_layer;
  std::shared_ptr<const KvProfile> profile;
  if (!o.profile_path.empty()) {
    profile = std::make_shared<const KvProfile>(read_profile(o.profile_path));
  }
  const std::vector<Method> methods = default_methods(n_layer, o.sweep, profile);
  std::vector<Accum> acc(methods.size());
  const size_t n_rows = static_cast<size_t>(o.prefix);
  std::vector<std::optional<SnapshotEncoding>> encodings(methods.size());
  std::vector<std::optional<baseline::TurboQuant>> tq(methods.size());
  for (size_t mi = 0; mi < methods.size(); ++mi) {
    encodings[mi] = file_encoding(methods[mi], model, o.group_size, n_rows, profile);
    if (methods[mi].kind == MethodKind::turboquant) {
      tq[mi].emplace(methods[mi].turboquant_bits, model.identity().head_dim);
    }
  }
  // llama.cpp's quantized KV types need flash attention and blocks that divide head_dim;
  // where it refuses, the row is emulated on the captured KV.
  std::vector<std::unique_ptr<Context>> native(methods.size());
  for (size_t mi = 0; mi < methods.size(); ++mi) {
    if (methods[mi].kind != MethodKind::ggml_type) continue;
    ContextSettings q = cs;
    q.flash_attn = true;
    q.type_k = q.type_v = methods[mi].ggml_type;
    try {
      native[mi] = std::make_unique<Context>(model, q);
    } catch (const Error&) {
      acc[mi].emulated = true;
    }
  }

  const size_t head_dim = model.identity().head_dim;
  const RopeParams rope = model_rope_params(model);  // the bridge's reading, freq_scale included
  bool layer0 = false;
  for (const Method& m : methods) {
    const auto recomputes = [](const std::vector<int>& b) {
      return std::find(b.begin(), b.end(), 0) != b.end();
    };
    layer0 = layer0 || recomputes(m.k_bits) || recomputes(m.v_bits);
  }

  const size_t n_vocab = static_cast<size_t>(model.n_vocab());
  for (int w = 0; w < o.n_contexts; ++w) {
    // Window: BOS + (window - 1) text tokens; the prefix includes BOS.
    std::vector<int32_t> tok{bos};
    const auto first = text.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(w) * (window - 1));
    tok.insert(tok.end(), first, first + static_cast<ptrdiff_t>(window - 1));
    const std::span<const int32_t> prefix(tok.data(), static_cast<size_t>(o.prefix));
    const std::span<const int32_t> cont(tok.data() + o.prefix, static_cast<size_t>(o.n_continue));
    const std::span<const int32_t> targets(tok.data() + o.prefix + 1,
                                           static_cast<size_t>(o.n_continue));
    ctx.clear();
    ctx.decode(prefix, 0, false);
    const KvSnapshot captured = capture_seq_state(ctx, prefix);
    ctx.clear();
    restore_seq_state(ctx, captured);
    const std::vector<float> exact = ctx.decode(cont, o.prefix, true);
    WindowInfo info;
    info.rope = rope;
    for (const KvCell& c : captured.data_stream().cells) info.positions.push_back(c.pos);
    KvLayer rebuilt;
    double layer0_err = 0;
    if (layer0) {
      rebuilt = rebuild_layer0(model, captured, rope);
      info.recomputed_layer0 = &rebuilt;
      const KvLayer& l0 = captured.data_stream().layers.at(0);
      const std::vector<float> a = layer_k_float(l0), b = layer_k_float(rebuilt);
      for (size_t i = 0; i < a.size(); ++i)
        layer0_err = std::max(layer0_err, double{std::abs(a[i] - b[i])});
    }

    for (size_t mi = 0; mi < methods.size(); ++mi) {
      std::vector<float> got;
      if (native[mi]) {
        Context& q = *native[mi];
        q.clear();
        q.decode(prefix, 0, false);
        got = q.decode(cont, o.prefix, true);
        const double el = static_cast<double>(o.prefix) * n_layer * 2 * model.identity().n_head_kv *
                          model.identity().head_dim;
        acc[mi].elements += el;
        acc[mi].k_bits_sum += ggml_type_bits(methods[mi].ggml_type) * el / 2;
        acc[mi].v_bits_sum += ggml_type_bits(methods[mi].ggml_type) * el / 2;
      } else if (encodings[mi]) {
        // The real file path: the whole .cgkv written, read back, restored.
        auto t0 = Clock::now();
        std::vector<uint8_t> file = snapshot_to_cgkv(captured, model.identity(), *encodings[mi]);
        acc[mi].encode_ms += ms_since(t0);
        acc[mi].file_bits_sum += 8.0 * static_cast<double>(file.size());
        for (const KvLayer& l : captured.data_stream().layers) {
          acc[mi].elements += static_cast<double>(n_rows * (k_row_elements(l) + v_row_elements(l)));
        }
        t0 = Clock::now();
        CgkvReader reader = CgkvReader::from_bytes(std::move(file));
        if (encodings[mi]->transform) reader.set_profile(encodings[mi]->transform->profile);
        const KvSnapshot s = unpack_snapshot(reader, &model);
        acc[mi].decode_ms += ms_since(t0);
        ctx.clear();
        restore_seq_state(ctx, s);
        got = ctx.decode(cont, o.prefix, true);
      } else {
        KvSnapshot s = captured;
        apply_method(methods[mi], o.group_size, head_dim, info, tq[mi] ? &*tq[mi] : nullptr, s,
                     acc[mi]);
        ctx.clear();
        restore_seq_state(ctx, s);
        got = ctx.decode(cont, o.prefix, true);
      }
      score(exact, got, n_vocab, targets, acc[mi]);
    }
    if (progress) {
      progress("window " + std::to_string(w + 1) + "/" + std::to_string(o.n_contexts) +
               (layer0 ? ", layer 0 recomputed: max |K error| " + std::to_string(layer0_err) : ""));
    }
  }

  std::vector<EvalRow> rows;
  for (size_t mi = 0; mi < methods.size(); ++mi) {
    const Accum& a = acc[mi];
    EvalRow r;
    const Method& m = methods[mi];
    r.method = m.name + (a.emulated ? " (emulated)" : "");
    r.family = m.family;
    r.emulated = a.emulated;
    const double half = a.elements / 2;  // K and V hold the same number of elements here
    r.estimate_bits = a.est_bits_sum / a.elements;
    if (encodings[mi]) {
      r.priced = "file";
      r.k_bits = r.v_bits = std::nan("");  // one file for both: no K/V split
      r.bits_per_element = a.file_bits_sum / a.elements;
    } else {
      r.priced = m.kind == MethodKind::codec       ? "codes"
                 : m.kind == MethodKind::ggml_type ? "ggml"
                 : m.kind == MethodKind::exact     ? "fp16"
                                                   : "layout";
      r.k_bits = a.k_bits_sum / half;
      r.v_bits = a.v_bits_sum / half;
      r.bits_per_element =
          m.estimate_only ? r.estimate_bits : (a.k_bits_sum + a.v_bits_sum) / a.elements;
    }
    r.ratio_vs_fp16 = 16.0 / r.bits_per_element;
    const double n = static_cast<double>(a.n);
    r.kl = a.kl / n;
    r.top1 = static_cast<double>(a.top1) / n;
    r.ppl = std::exp(a.nll / n);
    r.ppl_exact = std::exp(a.nll_exact / n);
    r.encode_ms = a.encode_ms;
    r.decode_ms = a.decode_ms;
    rows.push_back(r);
  }
  return rows;
}

std::string eval_rows_svg(const std::vector<EvalRow>& rows, const std::string& title) {
  std::vector<PlotSeries> series;
  for (const EvalRow& r : rows) {
    if (r.family == "exact" || r.family == "reference") continue;
    // Our quality levels are their own series: joined with the uniform ladder by x they zigzag.
    const bool profile_level =
        r.method.rfind("profile-", 0) == 0 && find_quality_level(r.method.substr(8)).has_value();
    const std::string name = r.family == "ours" && r.method.rfind("level-", 0) == 0 ? "ours levels"
                             : profile_level                        ? "ours (profile) levels"
                             : r.method.rfind("profile-kl", 0) == 0 ? "ours (profile) KL targets"
                                                                    : r.family;
    auto it = std::find_if(series.begin(), series.end(),
                           [&name](const PlotSeries& s) { return s.name == name; });
    if (it == series.end()) {
      series.push_back(PlotSeries{name, {}});
      it = series.end() - 1;
    }
    it->points.emplace_back(r.bits_per_element, r.kl);
  }
  PlotOptions o;
  o.title = title;
  o.x_label = "bits per K/V element (whole file for ours)";
  o.y_label = "mean KL(exact || restored), nats (log scale)";
  return svg_line_plot(series, o);
}

}  // namespace cachegen::llama
