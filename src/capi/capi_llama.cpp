// C API over the llama.cpp adapter (cachegen_llama): state files packed into .cgkv bytes and
// back, and capture/restore of a llama_context sequence. Compiled only with CACHEGEN_WITH_LLAMA
// into its own library, cachegen_capi_llama (src/llama/CMakeLists.txt).
#include <memory>
#include <optional>
#include <span>

#include "cachegen/cachegen_c.h"
#include "cachegen/container.h"
#include "cachegen/llama.h"
#include "capi/capi_buffers.h"
#include "capi/capi_status.h"

struct cachegen_llama_model {
  explicit cachegen_llama_model(const char* path) : model(path) {}
  cachegen::llama::Model model;
};

namespace {

using cachegen::Error;
using cachegen::ErrorCode;
using cachegen::capi::need;

cachegen::llama::PackOptions pack_options(const cachegen_llama_options* c) {
  cachegen::llama::PackOptions o;
  if (c == nullptr) return o;
  if (c->struct_size < sizeof(cachegen_llama_options)) {
    throw Error(ErrorCode::invalid_argument,
                "options->struct_size is not set (call cachegen_llama_options_init)");
  }
  if (c->level != nullptr && *c->level != '\0') o.level = c->level;
  o.lossless = c->lossless != 0;
  if (c->bits != 0) o.bits = c->bits;
  o.group_size = c->group_size;
  o.chunk_tokens = c->chunk_tokens;
  return o;
}

const cachegen::llama::Model* model_of(const cachegen_llama_model* m) {
  return m != nullptr ? &m->model : nullptr;
}

std::span<const uint8_t> input(const uint8_t* data, size_t size, const char* name) {
  if (size != 0) need(data, name);
  return {data, size};
}

}  // namespace

extern "C" {

int cachegen_llama_model_open(const char* gguf_path, cachegen_llama_model** out) {
  return cachegen::capi::guard([&] {
    need(out, "out");
    *out = nullptr;
    need(gguf_path, "gguf_path");
    *out = new cachegen_llama_model(gguf_path);
  });
}

void cachegen_llama_model_free(cachegen_llama_model* model) {
  delete model;
}

void cachegen_llama_options_init(cachegen_llama_options* c) {
  if (c == nullptr) return;
  const cachegen::llama::PackOptions o;
  *c = cachegen_llama_options{};
  c->struct_size = sizeof(cachegen_llama_options);
  c->group_size = o.group_size;
  c->chunk_tokens = o.chunk_tokens;
}

int cachegen_llama_pack(const uint8_t* state, size_t state_size, const cachegen_llama_model* model,
                        const cachegen_llama_options* options, uint8_t** out, size_t* out_size) {
  return cachegen::capi::guard([&] {
    const cachegen::capi::BytesOut result(out, out_size);
    result.set(cachegen::llama::pack_state_file(input(state, state_size, "state"), model_of(model),
                                                pack_options(options))
                   .cgkv);
  });
}

int cachegen_llama_unpack(const uint8_t* data, size_t size, const cachegen_llama_model* model,
                          uint8_t** out, size_t* out_size) {
  return cachegen::capi::guard([&] {
    const cachegen::capi::BytesOut result(out, out_size);
    const std::span<const uint8_t> bytes = input(data, size, "data");
    const cachegen::CgkvReader reader =
        cachegen::CgkvReader::from_bytes(std::vector<uint8_t>(bytes.begin(), bytes.end()));
    result.set(cachegen::llama::build_state_file(
        cachegen::llama::unpack_snapshot(reader, model_of(model))));
  });
}

int cachegen_llama_capture(const cachegen_llama_model* model, struct llama_context* ctx,
                           int32_t seq_id, const int32_t* tokens, size_t n_tokens,
                           const cachegen_llama_options* options, uint8_t** out, size_t* out_size) {
  return cachegen::capi::guard([&] {
    const cachegen::capi::BytesOut result(out, out_size);
    need(model, "model");
    need(ctx, "ctx");
    if (n_tokens != 0) need(tokens, "tokens");
    const cachegen::llama::KvSnapshot s =
        cachegen::llama::capture_seq_state(ctx, model->model, {tokens, n_tokens}, seq_id);
    result.set(cachegen::llama::snapshot_to_cgkv(
        s, s.model,
        cachegen::llama::pack_encoding(pack_options(options), &model->model,
                                       s.data_stream().layers.size())));
  });
}

int cachegen_llama_restore(const cachegen_llama_model* model, struct llama_context* ctx,
                           int32_t seq_id, const uint8_t* data, size_t size, size_t* out_n_tokens) {
  return cachegen::capi::guard([&] {
    if (out_n_tokens != nullptr) *out_n_tokens = 0;
    need(model, "model");
    need(ctx, "ctx");
    const std::span<const uint8_t> bytes = input(data, size, "data");
    const cachegen::CgkvReader reader =
        cachegen::CgkvReader::from_bytes(std::vector<uint8_t>(bytes.begin(), bytes.end()));
    const cachegen::llama::KvSnapshot s = cachegen::llama::cgkv_to_snapshot(reader, model->model);
    cachegen::llama::restore_seq_state(ctx, model->model, s, seq_id);
    if (out_n_tokens != nullptr) *out_n_tokens = s.n_cells();
  });
}

}  // extern "C"
