// Calibration profiles: the file (docs/FORMAT.md, "Calibration profile"), steps, and fitting.
#include "cachegen/profile.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

#include "cachegen/error.h"
#include "cachegen/npy.h"
#include "core/checks.h"
#include "core/wire.h"

namespace cachegen {
namespace {

constexpr uint8_t kMagic[4] = {'C', 'G', 'P', 'F'};
constexpr uint16_t kVersion = 1;
constexpr size_t kFixedBytes = 57;  // through the fingerprint length byte
constexpr size_t kMaxWidth = size_t{1} << 20;
constexpr float kMaxBasis = 1.001f;  // entries of unit vectors (float rounding allowed)

[[noreturn]] void bad(const std::string& why) {
  throw Error(ErrorCode::invalid_argument, "profile: " + why);
}

bool finite(float v) {
  return std::isfinite(v);
}

constexpr float kMinFactor = 1.0f / 256, kMaxFactor = 256;

// Floats per profiled tensor: sensitivity, step factors, mean, variance, basis.
uint64_t tensor_floats(uint64_t width, uint64_t block) {
  return 1 + 3 * width + width * block;
}

// Why the profile's values are unusable, or "" (shared by validate and parse).
std::string tensor_problem(const ProfileTensor& t, size_t width, size_t block) {
  if (t.mean.size() != width || t.variance.size() != width || t.basis.size() != width * block ||
      t.step_factor.size() != width)
    return "sizes do not match the width and block";
  if (!finite(t.sensitivity) || t.sensitivity < 0) return "sensitivity is not finite and >= 0";
  for (float f : t.step_factor) {
    if (!(f >= kMinFactor && f <= kMaxFactor)) return "a step factor is outside [2^-8, 2^8]";
  }
  for (float m : t.mean) {
    if (!finite(m) || std::fabs(m) > 65504.0f) return "a mean is not finite fp16 range";
  }
  for (float v : t.variance) {
    if (!finite(v) || v < 0) return "a variance is not finite and >= 0";
  }
  for (float b : t.basis) {
    if (!finite(b) || std::fabs(b) > kMaxBasis) return "a basis entry is outside [-1, 1]";
  }
  return "";
}

std::string shape_problem(const KvProfile& p) {
  if (p.n_layers < 1 || p.n_layers > 4096) return "n_layers must be in 1..4096";
  if (p.n_kv_heads < 1 || p.n_kv_heads > 65536) return "n_kv_heads must be in 1..65536";
  if (p.head_dim < 1 || p.head_dim > 65536) return "head_dim must be in 1..65536";
  if (p.width() > kMaxWidth) return "n_kv_heads * head_dim exceeds 2^20";
  if (p.block < 1 || p.block > kMaxProfileBlock || p.width() % p.block != 0)
    return "block must divide n_kv_heads * head_dim and be in 1..4096";
  if (p.model_fingerprint.size() > 255) return "model fingerprint longer than 255 bytes";
  for (char c : p.model_fingerprint) {
    if (c < 0x20 || c > 0x7e) return "model fingerprint is not printable ASCII";
  }
  if (p.key_pre_rope) {
    const std::string r = p.rope.problem(static_cast<size_t>(p.head_dim));
    if (!r.empty()) return "rope: " + r;
  }
  for (float s : p.level_scale) {
    if (!finite(s) || s < 0) return "level scales must be finite and >= 0";
  }
  if (!finite(p.sink_scale) || p.sink_scale <= 0 || p.sink_scale > 1)
    return "sink_scale must be in (0, 1]";
  if (p.profiled.size() != static_cast<size_t>(p.n_layers)) return "one profiled flag per layer";
  if (p.tensors.size() != static_cast<size_t>(p.n_layers) * 2) return "two tensors per layer";
  return "";
}

}  // namespace

void KvProfile::validate() const {
  if (const std::string s = shape_problem(*this); !s.empty()) bad(s);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (profiled[i / 2] > 1) bad("profiled flags are 0 or 1");
    if (!profiled[i / 2]) continue;
    const std::string s = tensor_problem(tensors[i], width(), block);
    if (!s.empty()) bad("layer " + std::to_string(i / 2) + (i % 2 ? " V: " : " K: ") + s);
  }
  if (std::none_of(profiled.begin(), profiled.end(), [](uint8_t f) { return f != 0; }))
    bad("no layer is profiled");
}

std::vector<uint8_t> KvProfile::serialize() const {
  validate();
  std::vector<uint8_t> out;
  wire::Writer w(out);
  for (uint8_t m : kMagic) w.u8(m);
  w.u16(kVersion);
  w.u16(0);
  w.u32(static_cast<uint32_t>(n_layers));
  w.u32(static_cast<uint32_t>(n_kv_heads));
  w.u32(static_cast<uint32_t>(head_dim));
  w.u32(static_cast<uint32_t>(block));
  w.u8(key_pre_rope ? 1 : 0);
  w.u8(key_pre_rope && rope.neox ? 1 : 0);
  w.u16(key_pre_rope ? static_cast<uint16_t>(rope.n_rot) : 0);
  w.f32(key_pre_rope ? rope.freq_base : 0);
  w.f32(key_pre_rope ? rope.freq_scale : 0);
  for (float s : level_scale) w.f32(s);
  w.u32(sink_tokens);
  w.f32(sink_scale);
  w.u8(static_cast<uint8_t>(model_fingerprint.size()));
  w.bytes(std::span(reinterpret_cast<const uint8_t*>(model_fingerprint.data()),
                    model_fingerprint.size()));
  for (uint8_t f : profiled) w.u8(f);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!profiled[i / 2]) continue;
    const ProfileTensor& t = tensors[i];
    w.f32(t.sensitivity);
    for (float v : t.step_factor) w.f32(v);
    for (float v : t.mean) w.f32(v);
    for (float v : t.variance) w.f32(v);
    for (float v : t.basis) w.f32(v);
  }
  w.u64(XXH64(out.data(), out.size(), 0));
  return out;
}

KvProfile KvProfile::parse(std::span<const uint8_t> bytes) {
  wire::Reader r(bytes, "profile", 0);
  if (bytes.size() < kFixedBytes + 8) {
    throw Error(ErrorCode::truncated_input, "profile: " + std::to_string(bytes.size()) +
                                                " bytes, shorter than its fixed fields");
  }
  if (!std::equal(kMagic, kMagic + 4, bytes.begin())) {
    throw Error(ErrorCode::corrupt_input, "profile: bad magic (not a cachegen profile)");
  }
  r.take(4, "magic");
  const uint16_t version = r.u16("version");
  if (version != kVersion) {
    throw Error(ErrorCode::unsupported_version,
                "profile: version " + std::to_string(version) + " (this reader knows 1)");
  }
  const uint64_t stored = wire::load_le(bytes.data() + bytes.size() - 8, 8);
  if (XXH64(bytes.data(), bytes.size() - 8, 0) != stored) {
    throw Error(ErrorCode::corrupt_input, "profile: checksum mismatch");
  }
  const auto corrupt = [](const std::string& why) {
    throw Error(ErrorCode::corrupt_input, "profile: " + why);
  };
  if (r.u16("flags") != 0) corrupt("flags are reserved (0)");
  KvProfile p;
  p.n_layers = static_cast<int>(std::min<uint32_t>(r.u32("n_layers"), 1u << 30));
  p.n_kv_heads = static_cast<int>(std::min<uint32_t>(r.u32("n_kv_heads"), 1u << 30));
  p.head_dim = static_cast<int>(std::min<uint32_t>(r.u32("head_dim"), 1u << 30));
  p.block = r.u32("block");
  const uint8_t pre = r.u8("key_pre_rope"), mode = r.u8("rope mode");
  const uint16_t n_rot = r.u16("n_rot");
  const float base = r.f32("freq_base"), scale = r.f32("freq_scale");
  if (pre > 1 || mode > 1) corrupt("key_pre_rope and rope mode are 0 or 1");
  p.key_pre_rope = pre == 1;
  if (p.key_pre_rope) {
    p.rope = RopeParams{base, scale, n_rot, mode == 1};
  } else if (mode != 0 || n_rot != 0 || base != 0 || scale != 0) {
    corrupt("RoPE fields must be 0 when keys are not pre-RoPE");
  }
  for (float& s : p.level_scale) s = r.f32("level scale");
  p.sink_tokens = r.u32("sink_tokens");
  p.sink_scale = r.f32("sink_scale");
  const uint8_t fp_len = r.u8("fingerprint length");
  const auto fp = r.take(fp_len, "fingerprint");
  p.model_fingerprint.assign(fp.begin(), fp.end());
  // Layers and shape before anything is allocated: the sizes must match the bytes present.
  if (p.n_layers >= 1 && p.n_layers <= 4096) {
    p.profiled.assign(static_cast<size_t>(p.n_layers), 0);
    p.tensors.resize(static_cast<size_t>(p.n_layers) * 2);
  }
  if (const std::string s = shape_problem(p); !s.empty()) corrupt(s);
  size_t n_profiled = 0;
  for (uint8_t& f : p.profiled) {
    f = r.u8("profiled flag");
    if (f > 1) corrupt("profiled flags are 0 or 1");
    n_profiled += f;
  }
  if (n_profiled == 0) corrupt("no layer is profiled");
  const uint64_t floats = tensor_floats(p.width(), p.block) * 2 * n_profiled;
  if (r.remaining() != floats * 4 + 8) {
    corrupt("holds " + std::to_string(r.remaining()) + " bytes of tensors and checksum, " +
            std::to_string(floats * 4 + 8) + " expected for its shape");
  }
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    if (!p.profiled[i / 2]) continue;
    ProfileTensor& t = p.tensors[i];
    t.sensitivity = r.f32("sensitivity");
    t.step_factor.resize(p.width());
    for (float& v : t.step_factor) v = r.f32("step factor");
    t.mean.resize(p.width());
    t.variance.resize(p.width());
    t.basis.resize(p.width() * p.block);
    for (float& v : t.mean) v = r.f32("mean");
    for (float& v : t.variance) v = r.f32("variance");
    for (float& v : t.basis) v = r.f32("basis");
    const std::string s = tensor_problem(t, p.width(), p.block);
    if (!s.empty()) corrupt("layer " + std::to_string(i / 2) + (i % 2 ? " V: " : " K: ") + s);
  }
  return p;
}

uint64_t KvProfile::id() const {
  const std::vector<uint8_t> b = serialize();
  return wire::load_le(b.data() + b.size() - 8, 8);
}

std::vector<float> KvProfile::steps(double scale) const {
  double sum = 0;
  size_t n = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (profiled[i / 2] && tensors[i].sensitivity > 0) {
      sum += tensors[i].sensitivity;
      ++n;
    }
  }
  const double mean = n ? sum / static_cast<double>(n) : 1.0;
  std::vector<float> out(tensors.size(), 0.0f);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!profiled[i / 2]) continue;
    const double s = tensors[i].sensitivity > 0 ? tensors[i].sensitivity : mean;
    out[i] = static_cast<float>(scale / std::sqrt(s / mean));
  }
  return out;
}

float KvProfile::scale_of(QualityLevel level) const {
  const int i = static_cast<int>(level) - 1;
  return i >= 0 && i < 3 ? level_scale[static_cast<size_t>(i)] : 0.0f;
}

double KvProfile::rate_bound(double kl, std::span<const uint8_t> skip) const {
  std::vector<double> lambda, sens;  // per coded component: variance, sensitivity
  for (size_t t = 0; t < tensors.size(); ++t) {
    const size_t l = t / 2;
    if (!profiled[l] || (l < skip.size() && skip[l])) continue;
    const ProfileTensor& pt = tensors[t];
    for (size_t c = 0; c < width(); ++c) {
      const double f = pt.step_factor[c];
      lambda.push_back(pt.variance[c]);
      sens.push_back(pt.sensitivity / (f * f));
    }
  }
  // Distortion theta / s_c per component, capped at its variance; theta by bisection (log).
  const double w = static_cast<double>(width());
  const auto kl_at = [&](double theta) {
    double k = 0;
    for (size_t i = 0; i < lambda.size(); ++i) k += sens[i] * std::min(theta / sens[i], lambda[i]);
    return k / w;
  };
  double lo = -80, hi = 40;  // log2 theta
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (kl_at(std::exp2(mid)) > kl ? hi : lo) = mid;
  }
  const double theta = std::exp2(lo);
  double bits = 0;
  for (size_t i = 0; i < lambda.size(); ++i) {
    if (sens[i] > 0 && lambda[i] > 0)
      bits += std::max(0.0, 0.5 * std::log2(lambda[i] * sens[i] / theta));
  }
  return bits / (static_cast<double>(n_layers) * 2 * w);
}

KvProfile read_profile(const std::string& path) {
  try {
    return KvProfile::parse(read_file_bytes(path));
  } catch (const Error& e) {
    if (e.message().find(path) != std::string::npos) throw;
    throw Error(e.code(), e.message() + " (in '" + path + "')");
  }
}

void write_profile(const std::string& path, const KvProfile& profile) {
  write_file_atomic(path, profile.serialize());
}

void symmetric_eigen(std::vector<double>& a, size_t n, std::vector<double>& values,
                     std::vector<double>& vectors) {
  std::vector<double> v(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) v[i * n + i] = 1.0;
  for (int sweep = 0; sweep < 64; ++sweep) {
    double off = 0, diag = 0;
    for (size_t i = 0; i < n; ++i) {
      diag += a[i * n + i] * a[i * n + i];
      for (size_t j = i + 1; j < n; ++j) off += a[i * n + j] * a[i * n + j];
    }
    if (off <= 1e-30 * diag || off == 0) break;
    for (size_t p = 0; p < n; ++p) {
      for (size_t q = p + 1; q < n; ++q) {
        const double apq = a[p * n + q];
        if (std::fabs(apq) < 1e-300) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (size_t k = 0; k < n; ++k) {  // columns p, q
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (size_t k = 0; k < n; ++k) {  // rows p, q
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
        for (size_t k = 0; k < n; ++k) {
          const double vkp = v[k * n + p], vkq = v[k * n + q];
          v[k * n + p] = c * vkp - s * vkq;
          v[k * n + q] = s * vkp + c * vkq;
        }
      }
    }
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return a[x * n + x] > a[y * n + y]; });
  values.assign(n, 0.0);
  vectors.assign(n * n, 0.0);
  for (size_t k = 0; k < n; ++k) {
    const size_t col = order[k];
    values[k] = a[col * n + col];
    // Sign: the largest entry positive, so the same covariance gives the same basis.
    size_t big = 0;
    for (size_t i = 0; i < n; ++i) {
      if (std::fabs(v[i * n + col]) > std::fabs(v[big * n + col])) big = i;
    }
    const double sign = v[big * n + col] < 0 ? -1.0 : 1.0;
    for (size_t i = 0; i < n; ++i) vectors[k * n + i] = sign * v[i * n + col];
  }
}

ProfileFitter::ProfileFitter(int n_layers, int n_kv_heads, int head_dim, size_t block,
                             std::vector<uint8_t> profiled)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      block_(block),
      profiled_(std::move(profiled)) {
  const KvProfile shape = shell();
  if (const std::string s = shape_problem(shape); !s.empty()) bad(s);
  const size_t w = shape.width(), n_t = shape.tensors.size();
  n_.assign(n_t, 0.0);
  sum_.resize(n_t);
  cross_.resize(n_t);
  for (size_t i = 0; i < n_t; ++i) {
    if (!profiled_[i / 2]) continue;
    sum_[i].assign(w, 0.0);
    cross_[i].assign(w * block_, 0.0);
  }
}

void ProfileFitter::add(int layer, int kind, std::span<const float> rows) {
  const size_t w = static_cast<size_t>(n_kv_heads_) * static_cast<size_t>(head_dim_);
  if (layer < 0 || layer >= n_layers_ || kind < 0 || kind > 1 ||
      !profiled_[static_cast<size_t>(layer)]) {
    bad("add: layer " + std::to_string(layer) + " is not profiled");
  }
  if (rows.size() % w != 0) bad("add: rows are not whole rows of the width");
  for (float v : rows) {
    if (!std::isfinite(v)) bad("add: the rows hold NaN or infinite values");
  }
  const size_t t = static_cast<size_t>(layer) * 2 + static_cast<size_t>(kind);
  std::vector<double>& sum = sum_[t];
  std::vector<double>& cross = cross_[t];
  for (size_t r = 0; r < rows.size(); r += w) {
    const float* x = rows.data() + r;
    for (size_t j = 0; j < w; ++j) sum[j] += x[j];
    for (size_t b = 0; b < w; b += block_) {
      for (size_t i = 0; i < block_; ++i) {
        const double xi = x[b + i];
        double* row = cross.data() + (b + i) * block_;
        for (size_t j = i; j < block_; ++j) row[j] += xi * x[b + j];
      }
    }
    n_[t] += 1;
  }
}

KvProfile ProfileFitter::shell() const {
  KvProfile p;
  p.n_layers = n_layers_;
  p.n_kv_heads = n_kv_heads_;
  p.head_dim = head_dim_;
  p.block = block_;
  p.profiled = profiled_;
  if (n_layers_ >= 1 && n_layers_ <= 4096) p.tensors.resize(static_cast<size_t>(n_layers_) * 2);
  return p;
}

KvProfile ProfileFitter::finish(const std::string& rotation) const {
  if (rotation != "pca" && rotation != "hadamard" && rotation != "identity")
    bad("finish: rotation must be pca, hadamard or identity, not '" + rotation + "'");
  if (rotation == "hadamard" && (block_ & (block_ - 1)) != 0)
    bad("finish: a Hadamard rotation needs a power-of-2 block, not " + std::to_string(block_));
  // A fixed rotation's rows (unit vectors): Hadamard rows with random signs per column.
  std::vector<double> fixed;
  if (rotation != "pca") {
    fixed.assign(block_ * block_, 0.0);
    uint32_t seed = 0x9e3779b9u;
    std::vector<double> sign(block_);
    for (double& s : sign) {
      seed = seed * 1664525u + 1013904223u;
      s = (seed >> 31) ? -1.0 : 1.0;
    }
    const double norm = 1.0 / std::sqrt(static_cast<double>(block_));
    for (size_t k = 0; k < block_; ++k) {
      for (size_t i = 0; i < block_; ++i) {
        fixed[k * block_ + i] = rotation == "identity"
                                    ? (k == i ? 1.0 : 0.0)
                                    : ((std::popcount(k & i) & 1) ? -norm : norm) * sign[i];
      }
    }
  }
  KvProfile p = shell();
  const size_t w = p.width();
  for (size_t t = 0; t < p.tensors.size(); ++t) {
    if (!profiled_[t / 2]) continue;
    if (n_[t] < 2) bad("finish: layer " + std::to_string(t / 2) + " has fewer than 2 rows");
    ProfileTensor& out = p.tensors[t];
    out.mean.resize(w);
    out.step_factor.assign(w, 1.0f);
    out.variance.resize(w);
    out.basis.resize(w * block_);
    const double n = n_[t];
    for (size_t j = 0; j < w; ++j) out.mean[j] = static_cast<float>(sum_[t][j] / n);
    std::vector<double> cov(block_ * block_), values, vectors;
    for (size_t b = 0; b < w; b += block_) {
      for (size_t i = 0; i < block_; ++i) {
        for (size_t j = i; j < block_; ++j) {
          const double c =
              cross_[t][(b + i) * block_ + j] / n - (sum_[t][b + i] / n) * (sum_[t][b + j] / n);
          cov[i * block_ + j] = cov[j * block_ + i] = c;
        }
      }
      if (rotation == "pca") {
        symmetric_eigen(cov, block_, values, vectors);
      } else {  // the fixed rotation; each component's variance is v' C v
        vectors = fixed;
        values.assign(block_, 0.0);
        for (size_t k = 0; k < block_; ++k) {
          for (size_t i = 0; i < block_; ++i) {
            for (size_t j = 0; j < block_; ++j)
              values[k] += fixed[k * block_ + i] * cov[i * block_ + j] * fixed[k * block_ + j];
          }
        }
      }
      for (size_t k = 0; k < block_; ++k) {
        out.variance[b + k] = static_cast<float>(std::max(values[k], 0.0));
        for (size_t i = 0; i < block_; ++i) {
          out.basis[(b + k) * block_ + i] = static_cast<float>(vectors[k * block_ + i]);
        }
      }
    }
  }
  return p;
}

}  // namespace cachegen
