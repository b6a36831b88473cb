// Internal helpers shared by the cache's source files.
#pragma once

#include <vector>

#include "cachegen/kv_cache.h"

namespace cachegen::detail {

std::vector<Half> view_to_half(const KVBlockView& x, const char* name);
CodeStream slice_groups(const CodeStream& s, size_t row0, size_t rows);
void append_stream(CodeStream& a, const CodeStream& b);
// Quantizes x[rows, dim] fp16 (rows <= group_size*k) as the cache does: the reference
// quantizer (ParamMode::reference) or the codec's compact grid (ParamMode::compact).
CodeStream quantize_rows_half(const Half* x, size_t rows, size_t dim, int bits,
                              const KVCacheConfig& config);
// Codes per-head streams of equal rows into one block starting at token_begin.
CompressedBlock code_block(const std::vector<CodeStream>& streams, size_t token_begin,
                           const KVCacheConfig& config);

}  // namespace cachegen::detail
