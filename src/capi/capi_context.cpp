// C API over ContextStore (context_store.h).
#include <optional>

#include "cachegen/cachegen_c.h"
#include "cachegen/context_store.h"
#include "capi/capi_buffers.h"
#include "capi/capi_status.h"
#include "capi/capi_store.h"

struct cachegen_context_store {
  cachegen::ContextStore context;
};

namespace {

using cachegen::Error;
using cachegen::ErrorCode;
using cachegen::capi::guard;
using cachegen::capi::need;

std::span<const int32_t> token_span(const int32_t* tokens, size_t n) {
  if (n) need(tokens, "tokens");
  return {tokens, n};
}

// The stored chunk `index` of tokens; not_found when it (or a chunk before it) is not stored.
cachegen::StoredChunk stored_chunk(const cachegen_context_store* c, std::span<const int32_t> tokens,
                                   size_t index) {
  need(c, "context");
  std::optional<cachegen::StoredChunk> chunk = c->context.find_chunk(tokens, index);
  if (!chunk) {
    throw Error(ErrorCode::not_found,
                "chunk " + std::to_string(index) + " of this context is not stored");
  }
  return std::move(*chunk);
}

}  // namespace

extern "C" {

int cachegen_context_store_create(cachegen_store* store, const uint8_t* fingerprint,
                                  size_t fingerprint_size, size_t chunk_tokens,
                                  cachegen_context_store** out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    need(store, "store");
    if (fingerprint_size) need(fingerprint, "fingerprint");
    cachegen::ContextStoreOptions options;
    if (chunk_tokens) options.chunk_tokens = chunk_tokens;
    *out = new cachegen_context_store{cachegen::ContextStore(
        *store->store, std::string(reinterpret_cast<const char*>(fingerprint), fingerprint_size),
        options)};
  });
}

void cachegen_context_store_free(cachegen_context_store* context) {
  delete context;
}

int cachegen_context_lookup(const cachegen_context_store* c, const int32_t* tokens, size_t n_tokens,
                            size_t* out_n_chunks) {
  return guard([&] {
    need(out_n_chunks, "out_n_chunks");
    *out_n_chunks = 0;
    need(c, "context");
    *out_n_chunks = c->context.lookup(token_span(tokens, n_tokens)).size();
  });
}

int cachegen_context_save(cachegen_context_store* c, const int32_t* tokens, size_t n_tokens,
                          size_t index, const char* level, const uint8_t* value, size_t size) {
  return guard([&] {
    need(c, "context");
    need(level, "level");
    if (size) need(value, "value");
    c->context.put_chunk(token_span(tokens, n_tokens), index, level, {value, size});
  });
}

int cachegen_context_load(const cachegen_context_store* c, const int32_t* tokens, size_t n_tokens,
                          size_t index, const char* level, uint8_t** out, size_t* out_size) {
  return guard([&] {
    const cachegen::capi::BytesOut result(out, out_size);
    need(level, "level");
    const std::span<const int32_t> t = token_span(tokens, n_tokens);
    const cachegen::StoredChunk chunk = stored_chunk(c, t, index);
    const std::optional<std::vector<uint8_t>> value =
        c->context.get_chunk(chunk, level, t.subspan(chunk.first_token, chunk.n_tokens));
    if (!value) {
      throw Error(ErrorCode::not_found,
                  "chunk " + std::to_string(index) + " is not stored at level '" + level + "'");
    }
    result.set(*value);
  });
}

int cachegen_context_levels(const cachegen_context_store* c, const int32_t* tokens, size_t n_tokens,
                            size_t index, char** out_levels, size_t* out_count) {
  return guard([&] {
    need(out_levels, "out_levels");
    *out_levels = nullptr;
    need(out_count, "out_count");
    *out_count = 0;
    const cachegen::StoredChunk chunk = stored_chunk(c, token_span(tokens, n_tokens), index);
    std::vector<std::string> names;
    for (const cachegen::ChunkLevelEntry& e : chunk.levels) names.push_back(e.level);
    *out_levels = cachegen::capi::malloc_strings(names);
    *out_count = names.size();
  });
}

}  // extern "C"
