// Internal helpers shared by the cache's source files.
#pragma once

#include <vector>

#include "cachegen/kv_cache.h"

namespace cachegen::detail {

// One [heads, tokens, dim] view's fp16 rows: head h's row r at base + h * head_stride +
// r * row_stride (head_dim values).
struct HalfRows {
  const Half* base;
  size_t head_stride, row_stride;
};
// Checks x (its data, dtype, every value finite in fp16) and returns its fp16 rows: fp16 where
// the caller keeps it, unless `copy`; otherwise (and for f32, bf16) converted into `storage`
// as [heads, tokens, dim]. fp16 read where the caller keeps it is checked for finite values
// only if check_in_place (the caller's quantizer checks them otherwise).
HalfRows half_rows(const KVBlockView& x, const char* name, bool copy, std::vector<Half>& storage,
                   bool check_in_place = true);
// rows rows of dim values from `from` (rows from_stride apart) to `to` (to_stride apart).
void copy_rows(const Half* from, size_t from_stride, Half* to, size_t to_stride, size_t rows,
               size_t dim);
CodeStream slice_groups(const CodeStream& s, size_t row0, size_t rows);
void append_stream(CodeStream& a, const CodeStream& b);
// Quantizes rows x fp16 of dim values, row r at x + r * stride, as the cache does into `out`
// (its buffers reused): the reference quantizer (ParamMode::reference: rows side by side,
// stride == dim) or the codec's compact grid (ParamMode::compact). Returns false where the
// rows' groups got other parameters together than each would alone: the grid could not hold
// some group's, so all fell back to fp16 or fp32 ones.
bool quantize_rows_half(const Half* x, size_t stride, size_t rows, size_t dim, int bits,
                        const KVCacheConfig& config, CodeStream& out);
// Codes per-head streams of equal rows into one block starting at token_begin.
CompressedBlock code_block(const std::vector<CodeStream>& streams, size_t token_begin,
                           const KVCacheConfig& config);

}  // namespace cachegen::detail
