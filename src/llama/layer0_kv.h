// Internal: layer 0's K and V computed from the GGUF weights alone, without running the model.
//
// In a llama-architecture decoder, layer 0's K and V of a token depend on that token only:
//   x = token_embd[tok];  h = rms_norm(x, eps) * attn_norm;  K = wk·h (+ bk);  V = wv·h (+ bv)
// then K is rotated by RoPE at the cell's position. Restoring a file whose layer 0 is not stored
// (QualityLevelSpec bits 0) rebuilds it here: the four or six tensors are read from the GGUF
// (token_embd only the rows of the distinct tokens present) and the arithmetic is ggml's own CPU
// ops (get_rows' to_float, rms_norm, mul, mul_mat, add), the ops llama.cpp's graph uses, so the
// numbers are llama.cpp's up to its matmul kernel choice. Cost: distinct tokens x n_embd x
// (K width + V width) multiply-adds, and no forward pass over the prefix (docs/QUALITY_LEVELS.md,
// "Layer 0").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cachegen/llama.h"

namespace cachegen::llama::detail {

// When layer 0 is recomputed rather than stored (SnapshotEncoding::quality(level, model)): when
// computing it costs no more time than moving the bytes of a stored layer 0 of the same quality
// (exact: fp16, 16 bits per value) over a reference link. Per value (the K/V widths cancel):
//   2 * n_embd / kLayer0Flops  <=  16 / 8 / kReferenceLinkBytesPerS,  i.e. n_embd <= 800.
// kLayer0Flops is the order of what ggml's CPU ops reach on layer 0 of the shared models on one
// core here (docs/QUALITY_LEVELS.md, "Layer 0"); the link is the low end of the paper's range,
// 100 Mbit/s. Small models recompute (their layer 0 is 1/5 of a file and takes microseconds per
// token); large ones (n_embd 2048 and up) store it, where it is a few percent of the file.
inline constexpr double kLayer0Flops = 10e9;
inline constexpr double kReferenceLinkBytesPerS = 100e6 / 8;
bool layer0_recompute_pays(size_t n_embd);

class Layer0Projector {
 public:
  // Reads the tensors from the model's GGUF file. Throws invalid_argument naming the reason when
  // the model's layer 0 is not the plain llama form above (see supported()).
  explicit Layer0Projector(const Model& model);
  ~Layer0Projector();
  Layer0Projector(const Layer0Projector&) = delete;
  Layer0Projector& operator=(const Layer0Projector&) = delete;

  // Whether layer 0 of `model` can be computed here; `why` (may be null) gets the reason if not.
  static bool supported(const Model& model, std::string* why);

  size_t k_width() const;  // n_head_kv * head_dim
  size_t v_width() const;
  // K (rotated by `rope` to `positions`) and V of each token, fp32 [n, width]. Token ids must be
  // inside the vocabulary (corrupt_input otherwise: they come from files).
  void compute(std::span<const int32_t> tokens, std::span<const int32_t> positions,
               const RopeParams& rope, std::vector<float>& k, std::vector<float>& v) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cachegen::llama::detail
