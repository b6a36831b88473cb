// `cachegen calibrate`: a model's calibration profile measured on real KV (cachegen/llama.h).
//
// Per window of the text (taken from its end): prefill the prefix, capture its KV, and score
// the next n_continue tokens from the exact state. The PCA of every layer's K (RoPE undone) and
// V rows over all windows gives the transforms; noise injected into one tensor at a time gives
// each tensor's KL per unit of mean squared error; transform files at a bisected scale give the
// scale that matches each lossy level's own KL on the same windows.
#include <llama.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "cachegen/llama_context.h"
#include "llama/eval_internal.h"

namespace cachegen::llama {
namespace {

[[noreturn]] void invalid(const std::string& why) {
  throw Error(ErrorCode::invalid_argument, "calibrate: " + why);
}

struct Window {
  KvSnapshot captured;
  std::vector<int32_t> cont;
  int32_t first_pos = 0;
  std::vector<float> exact;  // logits of cont from the exact state
};

// Mean KL over every window's scored tokens of the snapshots make(w) restores.
template <typename Make>
double mean_kl(Context& ctx, std::vector<Window>& windows, size_t n_vocab, Make&& make) {
  double kl = 0;
  size_t n = 0;
  for (size_t w = 0; w < windows.size(); ++w) {
    const KvSnapshot s = make(w);
    ctx.clear();
    restore_seq_state(ctx, s);
    const std::vector<float> got = ctx.decode(windows[w].cont, windows[w].first_pos, true);
    for (size_t t = 0; t < windows[w].cont.size(); ++t) {
      kl += detail::kl_divergence(&windows[w].exact[t * n_vocab], &got[t * n_vocab], n_vocab);
      ++n;
    }
  }
  return kl / static_cast<double>(n);
}

// A snapshot through a file and back (the real file path); bits counted into *bits.
KvSnapshot through_file(const KvSnapshot& s, const Model& model, const SnapshotEncoding& e,
                        double* bits, double* elements) {
  std::vector<uint8_t> file = snapshot_to_cgkv(s, model.identity(), e);
  *bits += 8.0 * static_cast<double>(file.size());
  for (const KvLayer& l : s.data_stream().layers) {
    *elements += static_cast<double>(s.n_cells() * (k_row_elements(l) + v_row_elements(l)));
  }
  CgkvReader reader = CgkvReader::from_bytes(std::move(file));
  if (e.transform) reader.set_profile(e.transform->profile);
  return unpack_snapshot(reader, &model);
}

}  // namespace

KvProfile calibrate_profile(const CalibrateOptions& o,
                            const std::function<void(const std::string&)>& progress) {
  if (o.n_windows < 1 || o.prefix < 2 || o.n_continue < 1)
    invalid("--windows and --continue must be >= 1, --prefix >= 2");
  if (o.block != "layer" && o.block != "head") invalid("--block must be layer or head");
  if (!(o.probe_noise > 0 && o.probe_noise <= 1)) invalid("probe noise must be in (0, 1]");
  if (o.bands < 1 || o.bands > 4096) invalid("--bands must be in 1..4096");
  if (!(o.sink_scale > 0 && o.sink_scale <= 1)) invalid("--sink-scale must be in (0, 1]");
  const auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  const Model model(o.model_path);
  const std::vector<int32_t> text = model.tokenize(detail::read_text(o.text_path), false);
  const size_t window = static_cast<size_t>(o.prefix + o.n_continue + 1);
  const size_t need = static_cast<size_t>(o.n_windows) * (window - 1);
  if (text.size() < need) {
    invalid("the text has " + std::to_string(text.size()) + " tokens, " + std::to_string(need) +
            " needed");
  }
  const ModelIdentity& id = model.identity();
  const ModelShape shape = model_cache_shape(model);
  const RopeParams rope = model_rope_params(model);
  const size_t H = static_cast<size_t>(shape.n_kv_heads), D = static_cast<size_t>(shape.head_dim);
  const size_t W = H * D, n_layers = static_cast<size_t>(shape.n_layers);
  const int32_t bos = llama_vocab_bos(llama_model_get_vocab(model.get()));
  Context ctx(model, detail::window_context_settings(window, o.flash_attn, o.n_threads));
  const size_t n_vocab = static_cast<size_t>(model.n_vocab());

  // 1. Capture the windows and fit the transforms.
  ProfileFitter fitter(shape.n_layers, shape.n_kv_heads, shape.head_dim, o.block == "head" ? D : W,
                       std::vector<uint8_t>(n_layers, 1));
  std::vector<Window> windows(static_cast<size_t>(o.n_windows));
  const size_t n_prefix = static_cast<size_t>(o.prefix);
  std::vector<int32_t> pos(n_prefix);
  for (size_t i = 0; i < n_prefix; ++i) pos[i] = static_cast<int32_t>(i);
  for (size_t w = 0; w < windows.size(); ++w) {
    std::vector<int32_t> tok{bos};
    const auto first = text.end() - static_cast<ptrdiff_t>((w + 1) * (window - 1));
    tok.insert(tok.end(), first, first + static_cast<ptrdiff_t>(window - 1));
    const std::span<const int32_t> prefix(tok.data(), n_prefix);
    Window& win = windows[w];
    win.cont.assign(tok.begin() + o.prefix, tok.begin() + o.prefix + o.n_continue);
    win.first_pos = o.prefix;
    ctx.clear();
    ctx.decode(prefix, 0, false);
    win.captured = capture_seq_state(ctx, prefix);
    ctx.clear();
    restore_seq_state(ctx, win.captured);
    win.exact = ctx.decode(win.cont, win.first_pos, true);
    const KvStream& st = win.captured.data_stream();
    for (size_t l = 0; l < n_layers; ++l) {
      std::vector<float> k = layer_k_float(st.layers[l]);
      rope_rows(k, n_prefix, H, D, pos, rope, true);
      fitter.add(static_cast<int>(l), 0, k);
      fitter.add(static_cast<int>(l), 1, layer_v_float(st.layers[l]));
    }
  }
  KvProfile p = fitter.finish(o.rotation);
  p.model_fingerprint = context_fingerprint(id);
  p.key_pre_rope = true;
  p.rope = rope;
  p.sink_tokens = o.sink_tokens;
  p.sink_scale = o.sink_scale;
  say("captured " + std::to_string(windows.size()) + " windows of " + std::to_string(o.prefix) +
      " tokens; " + o.rotation + " per " + o.block + " (" +
      std::to_string(o.block == "head" ? D : W) + " features)");

  // 2. Sensitivities: KL per unit of mean squared error, one band of components of one tensor
  // at a time (noise of the same power in every band: the power uniform steps leave).
  const size_t n_bands = std::min<size_t>(static_cast<size_t>(o.bands), p.block);
  for (size_t l = 0; l < n_layers; ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      ProfileTensor& t = p.tensors[l * 2 + static_cast<size_t>(kind)];
      double var = 0;
      for (float v : t.variance) var += v;
      const double sigma2 = o.probe_noise * var / static_cast<double>(W);
      if (!(sigma2 > 0)) {  // a constant tensor: nothing to probe (sensitivity 0 = the mean)
        say("layer " + std::to_string(l) + (kind ? " V" : " K") + ": constant, not probed");
        continue;
      }
      std::vector<double> comp(W, 0.0);
      std::string bands;
      for (size_t b = 0; b < n_bands; ++b) {
        // Components [c0, c1) of every block (variance order within the block).
        const size_t block = p.block, c0 = b * block / n_bands, c1 = (b + 1) * block / n_bands;
        if (c1 <= c0) continue;
        const double kl = mean_kl(ctx, windows, n_vocab, [&](size_t w) {
          KvSnapshot s = windows[w].captured;
          KvLayer& layer = s.data_stream().layers[l];
          std::vector<float> x = kind == 0 ? layer_k_float(layer) : layer_v_float(layer);
          if (kind == 0) rope_rows(x, n_prefix, H, D, pos, rope, true);
          std::mt19937 rng(
              static_cast<uint32_t>(100000 * l + 1000 * b + 10 * w + static_cast<size_t>(kind)));
          std::normal_distribution<float> noise(0.0f, static_cast<float>(std::sqrt(sigma2)));
          for (size_t r = 0; r < n_prefix; ++r) {
            for (size_t base = 0; base < W; base += block) {
              for (size_t c = c0; c < c1; ++c) {
                const float n = noise(rng);
                const float* v = t.basis.data() + (base + c) * block;
                for (size_t i = 0; i < block; ++i) x[r * W + base + i] += n * v[i];
              }
            }
          }
          if (kind == 0) {
            rope_rows(x, n_prefix, H, D, pos, rope, false);
            set_layer_k_float(layer, x);
          } else {
            set_layer_v_float(layer, x);
          }
          return s;
        });
        // KL = s_c * sigma2 * (band components) / W summed over the band.
        const double s_band =
            kl * static_cast<double>(W) / (sigma2 * static_cast<double>((c1 - c0) * (W / block)));
        for (size_t base = 0; base < W; base += block) {
          for (size_t c = c0; c < c1; ++c) comp[base + c] = s_band;
        }
        char buf[32];
        std::snprintf(buf, sizeof buf, " %.3g", s_band);
        bands += buf;
      }
      double mean = 0;
      for (double c : comp) mean += c;
      mean /= static_cast<double>(W);
      t.sensitivity = static_cast<float>(mean);
      for (size_t c = 0; c < W; ++c) {
        // step_c = step_t * sqrt(s_t / s_c): equal weighted distortion per component.
        const double f = mean > 0 ? std::sqrt(mean / std::max(comp[c], mean / 65536)) : 1.0;
        t.step_factor[c] = static_cast<float>(std::clamp(f, 1.0 / 256, 256.0));
      }
      say("layer " + std::to_string(l) + (kind ? " V" : " K") + ": sensitivity " +
          std::to_string(mean) + " (bands, high to low variance:" + bands + ")");
    }
  }

  // 3. Each lossy level's scale: the largest whose transform files reach the level's KL.
  if (o.levels) {
    double var = 0;
    size_t n = 0;
    for (size_t i = 0; i < p.tensors.size(); ++i) {
      for (float v : p.tensors[i].variance) var += v;
      n += W;
    }
    const double sigma = std::sqrt(var / static_cast<double>(n));
    for (QualityLevel level : {QualityLevel::high, QualityLevel::medium, QualityLevel::low}) {
      double level_bits = 0, level_el = 0;
      const SnapshotEncoding le = SnapshotEncoding::quality(level, model);
      const double target = mean_kl(ctx, windows, n_vocab, [&](size_t w) {
        return through_file(windows[w].captured, model, le, &level_bits, &level_el);
      });
      const auto profile_at = [&](double scale, double* bits, double* el) {
        auto cur = std::make_shared<const KvProfile>(p);
        SnapshotEncoding e = SnapshotEncoding::profiled(cur, model);
        e.transform->scale = scale;
        return mean_kl(ctx, windows, n_vocab, [&](size_t w) {
          return through_file(windows[w].captured, model, e, bits, el);
        });
      };
      double lo = std::log(sigma * 1e-4), hi = std::log(sigma * 10);
      double best_bits = 0, best_el = 1, best_kl = 0;
      bool found = false;
      for (int i = 0; i < 14; ++i) {
        const double mid = (lo + hi) / 2;
        double bits = 0, el = 0;
        const double kl = profile_at(std::exp(mid), &bits, &el);
        if (kl <= target) {
          found = true;
          lo = mid;
          best_bits = bits;
          best_el = el;
          best_kl = kl;
        } else {
          hi = mid;
        }
      }
      p.level_scale[static_cast<size_t>(level) - 1] = found ? static_cast<float>(std::exp(lo)) : 0;
      if (!found) {
        say(std::string("level ") + quality_level_name(level) + ": KL " + std::to_string(target) +
            " not reached by any scale searched; the level keeps its quantized form");
        continue;
      }
      say(std::string("level ") + quality_level_name(level) + ": KL " + std::to_string(target) +
          " at " + std::to_string(level_bits / level_el) + " bits/element; profile scale " +
          std::to_string(std::exp(lo)) + ": KL " + std::to_string(best_kl) + " at " +
          std::to_string(best_bits / best_el) + " bits/element");
    }
  }
  return p;
}

}  // namespace cachegen::llama
