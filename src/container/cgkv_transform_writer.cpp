// Writing transform files (codec 2): rows projected on a calibration profile's basis, one
// quantization step per tensor, the rate chosen by a scale, a size target or a KL target.
#include <algorithm>
#include <cmath>
#include <string>

#include "cachegen/error.h"
#include "cachegen/profile.h"
#include "container/cgkv_internal.h"
#include "core/checks.h"
#include "core/parallel.h"
#include "core/wire.h"
#include "profile/transform_codec.h"
#include "quant/kernels.h"

namespace cachegen {
namespace {

constexpr int kBisections = 40;

struct Plan {
  std::vector<size_t> stored;              // attention-tensor indices (2 * a + kind) stored
  std::vector<int> layer_of;               // per attention layer: its model layer
  std::vector<std::vector<float>> coeffs;  // per stored tensor: [n_tokens, width]
};

}  // namespace

std::vector<uint8_t> write_cgkv_transform(const ModelShape& shape, std::span<const float> kv,
                                          size_t n_tokens, const TransformEncoding& enc,
                                          std::span<const CgkvBlob> blobs, double* scale_used) {
  shape.validate();
  if (!enc.profile) detail::invalid("write_cgkv_transform: no profile");
  const KvProfile& p = *enc.profile;
  if (p.n_layers != shape.n_layers || p.n_kv_heads != shape.n_kv_heads ||
      p.head_dim != shape.head_dim) {
    detail::invalid("the profile is for " + std::to_string(p.n_layers) + " layers x " +
                    std::to_string(p.n_kv_heads) + " heads x " + std::to_string(p.head_dim) +
                    ", the cache is " + std::to_string(shape.n_layers) + " x " +
                    std::to_string(shape.n_kv_heads) + " x " + std::to_string(shape.head_dim));
  }
  const int targets = (enc.scale > 0) + (enc.bits_per_element > 0) + (enc.max_kl > 0);
  if (targets != 1 || !std::isfinite(enc.scale + enc.bits_per_element + enc.max_kl)) {
    detail::invalid(
        "transform encoding: give exactly one of scale, bits_per_element, max_kl (> 0)");
  }
  if (enc.chunk_tokens == 0 || enc.chunk_tokens > detail::kMaxTransformChunkTokens)
    detail::invalid("chunk_tokens must be in 1..2^18 in a transform file");
  if (n_tokens > detail::kMaxTokens) detail::invalid("n_tokens exceeds 2^40");
  const size_t width = p.width(), n_attn = static_cast<size_t>(shape.n_attention_layers());
  const size_t plane = detail::checked_mul(n_tokens, width, "kv");
  if (kv.size() != detail::checked_mul(n_attn * 2, plane, "kv")) {
    detail::invalid("kv has " + std::to_string(kv.size()) + " values, expected " +
                    std::to_string(n_attn * 2 * plane));
  }
  if (!enc.recompute.empty() && enc.recompute.size() != static_cast<size_t>(shape.n_layers))
    detail::invalid("recompute needs one flag per model layer");
  if (!detail::quant_kernels().all_finite(kv.data(), kv.size()))
    detail::invalid("kv holds NaN or infinite values");

  CgkvInfo info;
  info.version = detail::kCgkvVersion;
  info.n_layers = shape.n_layers;
  info.n_kv_heads = shape.n_kv_heads;
  info.head_dim = shape.head_dim;
  info.group_size = 1;
  info.n_tokens = n_tokens;
  info.chunk_tokens = enc.chunk_tokens;
  info.codec = ContainerCodec::transform;
  info.param_mode = ParamMode::compact;
  info.profile_id = p.id();
  info.sink_tokens =
      enc.sink_tokens < 0
          ? p.sink_tokens
          : static_cast<uint32_t>(std::min<int64_t>(enc.sink_tokens, int64_t{UINT32_MAX}));
  info.sink_scale = enc.sink_tokens < 0 ? p.sink_scale : enc.sink_scale;
  if (!(info.sink_scale > 0 && info.sink_scale <= 1))
    detail::invalid("sink_scale must be in (0, 1]");
  const size_t n_chunks = (n_tokens + enc.chunk_tokens - 1) / enc.chunk_tokens;
  info.chunks.resize(n_chunks);
  for (size_t c = 0; c < n_chunks; ++c) {
    info.chunks[c].token_begin = c * enc.chunk_tokens;
    info.chunks[c].n_tokens = std::min(enc.chunk_tokens, n_tokens - c * enc.chunk_tokens);
  }
  info.layers.resize(static_cast<size_t>(shape.n_layers));
  Plan plan;
  for (int l = 0; l < shape.n_layers; ++l) {
    CgkvLayerInfo& li = info.layers[static_cast<size_t>(l)];
    li.attention = shape.has_attention(l);
    if (!li.attention) continue;
    const size_t a = plan.layer_of.size();
    plan.layer_of.push_back(l);
    li.recomputed = !enc.recompute.empty() && enc.recompute[static_cast<size_t>(l)] != 0;
    if (li.recomputed) continue;
    if (!p.profiled[static_cast<size_t>(l)]) {
      detail::invalid("layer " + std::to_string(l) + " is not in the profile (recompute it)");
    }
    if (p.key_pre_rope) {
      li.key_transform = KeyTransform::pre_rope;
      info.has_rope = true;
    }
    plan.stored.push_back(2 * a);
    plan.stored.push_back(2 * a + 1);
  }
  if (plan.stored.empty()) detail::invalid("write_cgkv_transform: no layer is stored");
  if (info.has_rope) {
    info.rope = p.rope;
    info.rope_position_offset = enc.rope_position_offset;
    if (enc.rope_position_offset < 0 ||
        int64_t{enc.rope_position_offset} + static_cast<int64_t>(n_tokens) > int64_t{INT32_MAX} + 1)
      detail::invalid("rope_position_offset puts positions outside 0..2^31 - 1");
  }

  // Coefficients of every stored tensor (keys with RoPE undone first), computed once.
  plan.coeffs.resize(plan.stored.size());
  std::vector<int32_t> pos(n_tokens);
  for (size_t i = 0; i < n_tokens; ++i) pos[i] = static_cast<int32_t>(enc.rope_position_offset + i);
  detail::parallel_for(plan.stored.size(), [&](size_t s) {
    const size_t t = plan.stored[s];
    const int layer = plan.layer_of[t / 2];
    std::vector<float> x(kv.begin() + static_cast<ptrdiff_t>(t * plane),
                         kv.begin() + static_cast<ptrdiff_t>((t + 1) * plane));
    if (t % 2 == 0 && p.key_pre_rope) {
      rope_rows(x, n_tokens, static_cast<size_t>(shape.n_kv_heads),
                static_cast<size_t>(shape.head_dim), pos, p.rope, true);
    }
    plan.coeffs[s].resize(plane);
    detail::project_rows(x, p.tensor(layer, static_cast<int>(t % 2)), width, p.block,
                         plan.coeffs[s]);
  });

  const auto steps_of = [&](double scale) {
    const std::vector<float> all = p.steps(scale);
    std::vector<float> out(plan.stored.size());
    for (size_t s = 0; s < plan.stored.size(); ++s) {
      const size_t t = plan.stored[s];
      out[s] =
          std::clamp(all[static_cast<size_t>(plan.layer_of[t / 2]) * 2 + t % 2], 1e-30f, 1e30f);
    }
    return out;
  };
  const auto tensor_of = [&](size_t s) -> const ProfileTensor& {
    const size_t t = plan.stored[s];
    return p.tensor(plan.layer_of[t / 2], static_cast<int>(t % 2));
  };
  const auto chunk_steps = [&](size_t s, float step, size_t c) {
    const CgkvChunkInfo& ci = info.chunks[c];
    detail::TransformSteps ts;
    ts.step = step;
    ts.factor = tensor_of(s).step_factor;
    ts.sink_rows = info.sink_tokens > ci.token_begin
                       ? std::min<size_t>(info.sink_tokens - ci.token_begin, ci.n_tokens)
                       : 0;
    ts.sink_scale = info.sink_scale;
    return ts;
  };
  const auto rows_of = [&](size_t s, size_t c) {
    const CgkvChunkInfo& ci = info.chunks[c];
    return std::span<const float>(plan.coeffs[s])
        .subspan(ci.token_begin * width, ci.n_tokens * width);
  };
  // Every chunk's tensors at a scale.
  const auto code = [&](double scale) {
    const std::vector<float> steps = steps_of(scale);
    std::vector<std::vector<uint8_t>> chunks(n_chunks);
    detail::parallel_for(n_chunks, [&](size_t c) {
      wire::Writer w(chunks[c]);
      for (size_t s = 0; s < plan.stored.size(); ++s) {
        const std::vector<uint8_t> data =
            detail::pack_coefficients(rows_of(s, c), width, chunk_steps(s, steps[s], c));
        w.varint(data.size());
        w.bytes(data);
      }
    });
    return chunks;
  };
  const uint64_t fixed_bytes = [&] {
    uint64_t b =
        detail::header_size(info.layers.size(), n_chunks, blobs.size(), info.has_rope, true);
    for (const CgkvBlob& blob : blobs) b += blob.bytes.size();
    return b;
  }();
  const auto file_bytes = [&](const std::vector<std::vector<uint8_t>>& chunks) {
    uint64_t b = fixed_bytes;
    for (const auto& c : chunks) b += c.size();
    return b;
  };
  // Estimated KL: sum over tensors and components of the component's sensitivity (the
  // tensor's over the square of its step factor) * its squared error per tensor element.
  const auto predicted_kl = [&](double scale) {
    const std::vector<float> steps = steps_of(scale);
    double mean_s = 0;
    size_t n_s = 0;
    for (const ProfileTensor& t : p.tensors) {
      if (t.sensitivity > 0) {
        mean_s += t.sensitivity;
        ++n_s;
      }
    }
    mean_s = n_s ? mean_s / static_cast<double>(n_s) : 1.0;
    std::vector<double> kl(plan.stored.size());
    detail::parallel_for(plan.stored.size(), [&](size_t s) {
      std::vector<double> err(width, 0.0);
      for (size_t c = 0; c < n_chunks; ++c)
        detail::quantization_error(rows_of(s, c), width, chunk_steps(s, steps[s], c), err);
      const ProfileTensor& pt = tensor_of(s);
      const double sens = pt.sensitivity > 0 ? pt.sensitivity : mean_s;
      double weighted = 0;
      for (size_t c = 0; c < width; ++c) {
        const double f = pt.step_factor[c];
        weighted += sens / (f * f) * err[c];
      }
      kl[s] = weighted / static_cast<double>(std::max<size_t>(plane, 1));
    });
    double sum = 0;
    for (double k : kl) sum += k;
    return sum;
  };

  // The scales the searches cover: from steps that keep every |coefficient| / step within the
  // coded range (32767) to steps that zero every coefficient.
  double min_scale = 1e-30, max_scale = 1e-30;
  {
    const std::vector<float> unit = steps_of(1.0);
    for (size_t s = 0; s < plan.stored.size(); ++s) {
      const std::vector<float>& f = tensor_of(s).step_factor;
      for (size_t i = 0; i < plan.coeffs[s].size(); ++i) {
        const double v = std::fabs(plan.coeffs[s][i]) / unit[s] / f[i % width];
        min_scale = std::max(min_scale, v / 32000.0);
        max_scale = std::max(max_scale, 4.0 * v);
      }
    }
    max_scale = std::max(max_scale, min_scale * 2);
  }
  if (enc.scale > 0 && enc.scale < min_scale * (32000.0 / 32767.0)) {
    // Some coefficient would leave the coded range (|q| <= 32767) and be clipped.
    detail::invalid("scale " + std::to_string(enc.scale) +
                    " is too fine for this cache: a coefficient would exceed the coded range; "
                    "use a scale >= " +
                    std::to_string(min_scale));
  }
  double scale = enc.scale;
  std::vector<std::vector<uint8_t>> chunks;
  if (enc.bits_per_element > 0) {
    // The smallest scale (finest steps) whose file fits: bytes fall as the scale grows.
    const double elements = static_cast<double>(n_attn * 2 * plane);
    const auto fits = [&](const std::vector<std::vector<uint8_t>>& ch) {
      return static_cast<double>(file_bytes(ch)) * 8.0 <= enc.bits_per_element * elements;
    };
    double lo = std::log(min_scale), hi = std::log(max_scale);
    chunks = code(std::exp(hi));
    if (!fits(chunks)) {
      detail::invalid("bits_per_element " + std::to_string(enc.bits_per_element) +
                      " is below the smallest this file reaches (" +
                      std::to_string(static_cast<double>(file_bytes(chunks)) * 8.0 / elements) +
                      ")");
    }
    scale = std::exp(hi);
    for (int i = 0; i < kBisections && hi - lo > 1e-3; ++i) {
      const double mid = (lo + hi) / 2;
      std::vector<std::vector<uint8_t>> c = code(std::exp(mid));
      if (fits(c)) {
        hi = mid;
        scale = std::exp(mid);
        chunks = std::move(c);
      } else {
        lo = mid;
      }
    }
  } else {
    if (enc.max_kl > 0) {
      // The largest scale whose estimated KL stays within the target.
      double lo = std::log(min_scale), hi = std::log(max_scale);
      if (predicted_kl(std::exp(lo)) > enc.max_kl)
        detail::invalid("max_kl " + std::to_string(enc.max_kl) +
                        " is below what the finest step reaches");
      for (int i = 0; i < kBisections && hi - lo > 1e-3; ++i) {
        const double mid = (lo + hi) / 2;
        (predicted_kl(std::exp(mid)) <= enc.max_kl ? lo : hi) = mid;
      }
      scale = std::exp(lo);
    }
    chunks = code(scale);
  }
  const std::vector<float> steps = steps_of(scale);
  for (size_t s = 0; s < plan.stored.size(); ++s) {
    const size_t t = plan.stored[s];
    CgkvLayerInfo& li = info.layers[static_cast<size_t>(plan.layer_of[t / 2])];
    (t % 2 == 0 ? li.key_step : li.value_step) = steps[s];
  }
  if (scale_used) *scale_used = scale;
  return detail::assemble_cgkv(info, chunks, blobs);
}

}  // namespace cachegen
