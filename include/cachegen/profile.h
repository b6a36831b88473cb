// cachegen: calibration profiles — a model's measured KV statistics, from which the transform
// codec (container codec 2, docs/FORMAT.md "Calibration profile") codes a cache.
//
// A profile holds, per attention layer and K/V, a decorrelating orthonormal basis (PCA of the
// layer's rows: keys with RoPE undone) in blocks of `block` features, the per-component
// variances, and the sensitivity of the model's output to that tensor's error and to each band
// of its components (KL per unit of mean squared error, measured by `cachegen calibrate`).
// Coding a row: its coefficients y = B (x - mean) are quantized with one uniform step per
// component and entropy-coded, so low-variance components cost almost nothing and components
// under their step drop to zero: the rate goes where the variance is (reverse water-filling).
// Steps follow the sensitivities (step = scale / sqrt(sensitivity / mean sensitivity), per
// tensor, times the component's step factor), which spends the rate where the model feels the
// error; one `scale` moves the whole file along its rate–quality curve.
//
// Thread safety: a KvProfile is a value; its const functions are pure.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cachegen/quality_levels.h"
#include "cachegen/transform.h"

namespace cachegen {

// Largest block (features decorrelated together) a profile may use: the decoder's work per
// value is at most one block's components.
inline constexpr size_t kMaxProfileBlock = 4096;

// One tensor (a layer's K or V) of a profile.
struct ProfileTensor {
  std::vector<float> mean;      // [width]
  std::vector<float> variance;  // [width]: component variances, descending within each block
  // [width / block][block][block]: block b's component c is the unit vector
  // basis[(b * block + c) * block + 0 .. block); features b*block .. (b+1)*block.
  std::vector<float> basis;
  // Mean KL (nats per predicted token) per unit of mean squared error per element, measured by
  // injecting noise into this tensor alone; 0 = not measured (treated as the profile's mean).
  float sensitivity = 0;
  // [width]: component c's step relative to the tensor's (in [2^-8, 2^8]): the model feels
  // error in some components more than in others (queries align with the keys' main
  // directions), so those get finer steps. Component c's sensitivity is
  // sensitivity / step_factor[c]^2.
  std::vector<float> step_factor;
};

struct KvProfile {
  std::string model_fingerprint;  // the model it was measured on (context_fingerprint); <= 255
  int n_layers = 0, n_kv_heads = 0, head_dim = 0;
  size_t block = 0;           // features decorrelated together: head_dim or the whole width
  bool key_pre_rope = false;  // keys fitted (and coded) with RoPE undone, by `rope`
  RopeParams rope;
  // Per model layer: profiled (an attention layer whose K/V the codec may store).
  std::vector<uint8_t> profiled;
  // [n_layers * 2], K then V; empty tensors for layers not profiled.
  std::vector<ProfileTensor> tensors;
  // The step scale of each lossy quality level (high, medium, low) chosen by calibration to
  // match that level's measured KL at fewer bits; 0 = not calibrated.
  std::array<float, 3> level_scale{};
  // The sink tokens kept at a finer step (sink_scale times the step), chosen by calibration.
  uint32_t sink_tokens = 0;
  float sink_scale = 1;

  size_t width() const { return static_cast<size_t>(n_kv_heads) * static_cast<size_t>(head_dim); }
  const ProfileTensor& tensor(int layer, int kind) const {
    return tensors[static_cast<size_t>(layer) * 2 + static_cast<size_t>(kind)];
  }
  // Checks every field as parse does; Error(invalid_argument) naming the first bad one.
  void validate() const;
  // The file (docs/FORMAT.md, "Calibration profile"), ending in its xxHash64.
  std::vector<uint8_t> serialize() const;
  // Parses and validates a profile file; corrupt_input / truncated_input /
  // unsupported_version naming the field.
  static KvProfile parse(std::span<const uint8_t> bytes);
  // The profile's identity: the xxHash64 its file ends with (what a .cgkv records).
  uint64_t id() const;
  // The step of every tensor [n_layers * 2] at `scale`: scale / sqrt(sensitivity / s_mean)
  // (s_mean = the mean measured sensitivity; unmeasured tensors get the mean), 0 for tensors
  // not profiled.
  std::vector<float> steps(double scale) const;
  // The scale of a quality level, or 0 when the profile has none for it (lossless has none).
  float scale_of(QualityLevel level) const;
  // The rate-distortion bound of the profile's own statistics at a target KL: bits per K/V
  // element (over all n_layers layers) that reverse water-filling needs for Gaussian
  // coefficients with the measured variances, KL = sum of component sensitivity x error per
  // tensor element. Layers flagged in `skip` (e.g. recomputed layer 0) cost nothing.
  double rate_bound(double kl, std::span<const uint8_t> skip = {}) const;
};

KvProfile read_profile(const std::string& path);
// Writes as write_file_atomic does.
void write_profile(const std::string& path, const KvProfile& profile);

// Fits a profile's transforms from sample rows: add() every row of every profiled tensor,
// then finish(). Accumulates sums in double; finish() runs a Jacobi eigendecomposition of each
// block's covariance (O(block^3) per block).
class ProfileFitter {
 public:
  // `profiled` per model layer; block divides n_kv_heads * head_dim and is <= kMaxProfileBlock.
  ProfileFitter(int n_layers, int n_kv_heads, int head_dim, size_t block,
                std::vector<uint8_t> profiled);
  // rows [n, width] of (layer, kind) (keys already pre-RoPE when the profile says so).
  void add(int layer, int kind, std::span<const float> rows);
  // The profile with mean, variance and basis set (sensitivities 0, levels uncalibrated);
  // the caller fills the identity, RoPE and the rest. The basis: the PCA of each block
  // (variances descending), or — for comparison — a fixed rotation measured on the same
  // rows: `rotation` "hadamard" (the Walsh-Hadamard transform with seeded random signs, as
  // TurboQuant rotates; block a power of 2) or "identity" (the channels as they are).
  KvProfile finish(const std::string& rotation = "pca") const;

 private:
  KvProfile shell() const;  // the shape fields, tensors empty
  int n_layers_, n_kv_heads_, head_dim_;
  size_t block_;
  std::vector<uint8_t> profiled_;
  std::vector<double> n_;                         // rows per tensor
  std::vector<std::vector<double>> sum_, cross_;  // per tensor: [width], [blocks][block][block]
};

// Symmetric eigendecomposition (cyclic Jacobi) of the n x n matrix a (row-major, overwritten):
// eigenvalues descending, vectors[k * n + i] = component i of eigenvector k.
void symmetric_eigen(std::vector<double>& a, size_t n, std::vector<double>& values,
                     std::vector<double>& vectors);

}  // namespace cachegen
