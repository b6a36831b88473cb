// LayerKVCache::trim: drop the newest tokens and correct every counter.
#include <cstring>
#include <string>

#include "cache/layer_kv_cache_internal.h"
#include "cachegen/kv_cache.h"
#include "core/checks.h"

namespace cachegen {

void LayerKVCache::trim(size_t n) {
  if (n > n_tokens_) {
    detail::invalid("trim(" + std::to_string(n) + ") exceeds the cache's " +
                    std::to_string(n_tokens_) + " tokens");
  }
  if (n == 0) return;
  if (recomputed()) {
    n_tokens_ -= n;
    return;
  }
  const size_t gs = config_.group_size;
  const size_t new_n = n_tokens_ - n;
  const size_t qend = new_n / gs * gs;  // tokens that stay quantized
  const size_t keep_rows = new_n - qend;
  // Survivors of a partly trimmed group return to the residual buffer (as fp16 values: if the
  // group was quantized, its dequantized values; keys stay pre-RoPE: fetch() returns them as
  // stored).
  const std::vector<Half> keep[2] = {fetch(0, qend, new_n), fetch(1, qend, new_n)};
  const size_t pending_begin = n_tokens_ - residual_rows_ - pending_rows_;
  size_t blocks_end = 0;
  for (int kind = 0; kind < 2; ++kind) {
    PlaneState& p = plane_[kind];
    std::vector<CompressedBlock> blocks;
    std::vector<CodeStream> pending(heads_);
    for (CompressedBlock& b : p.blocks) {
      if (b.token_begin + b.n_tokens <= qend) {
        blocks.push_back(std::move(b));
      } else if (b.token_begin < qend) {  // straddles: its kept groups become pending codes
        const std::vector<CodeStream> s = decode_batch(b.bytes);
        for (size_t h = 0; h < heads_; ++h) {
          pending[h] = detail::slice_groups(s[h], 0, qend - b.token_begin);
        }
      }
    }
    if (pending_rows_ > 0 && pending_begin < qend) {
      for (size_t h = 0; h < heads_; ++h) {
        pending[h] = detail::slice_groups(p.pending[h], 0, qend - pending_begin);
      }
    }
    blocks_end = blocks.empty() ? 0 : blocks.back().token_begin + blocks.back().n_tokens;
    p.blocks = std::move(blocks);
    p.pending = std::move(pending);
    for (size_t h = 0; h < heads_ && keep_rows > 0; ++h) {
      std::memcpy(residual_buffer(kind) + h * gs * dim_, keep[kind].data() + h * keep_rows * dim_,
                  keep_rows * dim_ * sizeof(Half));
    }
  }
  n_tokens_ = new_n;
  residual_rows_ = keep_rows;
  pending_rows_ = qend - blocks_end;
}

}  // namespace cachegen
