// Internal pieces shared by the state parser, the state-file reader and the element access.
#pragma once

#include <ggml.h>

#include <string>
#include <vector>

#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "core/wire.h"

namespace cachegen::llama::detail {

// a * b, or throws corrupt_input when it overflows 64 bits.
inline uint64_t checked_mul(uint64_t a, uint64_t b, const char* field) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw Error(ErrorCode::corrupt_input, std::string("llama state: '") + field + "' overflows");
  }
  return r;
}

// Validates a ggml type id read from state bytes; fails (corrupt_input) for unknown types.
const ggml_type_traits& checked_type(wire::Reader& in, int32_t type, const char* field);
// u32 n_stream + per-stream KV blocks.
void parse_kv_block(wire::Reader& in, const ParseOptions& options, bool cell_ext,
                    std::vector<KvStream>& streams);
void build_kv_block(const KvSnapshot& snapshot, wire::Writer& out);
// Error(invalid_argument) unless every layer's K and V hold n_cells rows of their row size.
void check_layer_sizes(const KvStream& stream);
// io_magic of llama_context::state_seq_get_data (llama-context.cpp), frozen by the release.
inline constexpr uint32_t kSeqStateMagic = 0xaf143cd8u;

// State bytes of `kind`; a sequence state starts with magic + seq_id when seq_header (the
// in-memory form) and without them in state files.
KvSnapshot parse_state(std::span<const uint8_t> bytes, const ParseOptions& options, StateKind kind,
                       bool seq_header);
void build_state_into(const KvSnapshot& snapshot, bool seq_header, wire::Writer& out);

}  // namespace cachegen::llama::detail
