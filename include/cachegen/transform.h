// cachegen: reversible transforms applied to K/V before quantization (the quality levels that
// use them: cachegen/quality_levels.h).
//
// Layout: every transform works in place on token-major fp32 rows [n_rows, n_heads, head_dim]
// (llama.cpp's K/V row layout). Each has an exact mathematical inverse; in fp32 the round trip
// is exact to a few ulps (tests bound it well inside fp16 rounding).
//
// Thread safety: all functions are re-entrant. Errors: Error(invalid_argument) naming the bad
// argument for mismatched sizes or unsupported shapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cachegen/codec.h"

namespace cachegen {

// Orthonormal Walsh–Hadamard transform over head_dim of every head (QuaRot-style rotation that
// spreads outlier channels); head_dim must be a power of two. It is its own inverse.
void hadamard_heads(std::span<float> x, size_t n_rows, size_t n_heads, size_t head_dim);
// A seeded random orthogonal rotation of every head vector (TurboQuant-style): channel c
// multiplied by a random sign s_c (from `seed`, the same for every head and row), then the
// orthonormal Walsh–Hadamard transform; inverse applies H then the signs. Orthogonal, so norms
// are kept; head_dim must be a power of two.
void random_sign_hadamard_heads(std::span<float> x, size_t n_rows, size_t n_heads, size_t head_dim,
                                uint64_t seed, bool inverse);

// Rotary position embedding as llama.cpp applies it to keys (ggml_rope_ext, no YaRN context
// extension): per head, channel pairs rotated by freq_scale * pos * freq_base^(-2i/n_rot).
struct RopeParams {
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // linear position scaling (llama.cpp's rope_freq_scale), > 0
  int n_rot = 0;            // rotated channels per head (<= head_dim, even); 0 = head_dim
  bool neox = false;        // pairs (i, i + n_rot/2) (NEOX) instead of adjacent (i, i + 1) (NORM)
  bool operator==(const RopeParams&) const = default;
  // Accepted ranges: freq_base in [1, 1e12], freq_scale in [1e-6, 1e3] (NaN rejected), which
  // keep every angle finite for positions below 2^31; n_rot even, <= 65536 and <= head_dim.
  // Error(invalid_argument) naming the bad field (head_dim 0: n_rot is not checked against it).
  void validate(size_t head_dim = 0) const;
  // What validate() would throw about (without "rope: "), or "" when the parameters are valid.
  std::string problem(size_t head_dim = 0) const;
};
inline constexpr float kRopeMinFreqBase = 1.0f, kRopeMaxFreqBase = 1e12f;
inline constexpr float kRopeMinFreqScale = 1e-6f, kRopeMaxFreqScale = 1e3f;
// Rotates rows by their positions (positions.size() == n_rows); inverse undoes it, giving the
// pre-RoPE keys that the model's K projection produced.
void rope_rows(std::span<float> x, size_t n_rows, size_t n_heads, size_t head_dim,
               std::span<const int32_t> positions, const RopeParams& rope, bool inverse);

// The cos and sin rope_rows uses for each of `positions` ([rows][n_rot / 2] each): callers
// rotating many tensors at the same positions (every layer's keys) compute them once.
struct RopeAngles {
  size_t n_pairs = 0;
  std::vector<float> cos, sin;
};
RopeAngles rope_angles(std::span<const int32_t> positions, size_t head_dim, const RopeParams& rope,
                       bool inverse);
// rope_rows with angles computed ahead: row r takes the angles of row first_row + r; the same
// values as rope_rows with those positions.
void rope_rows(std::span<float> x, size_t n_rows, size_t n_heads, size_t head_dim,
               const RopeAngles& angles, size_t first_row, bool neox);

}  // namespace cachegen
