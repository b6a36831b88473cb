// C API over encode_kv_array and CgkvReader: KV tensors to .cgkv bytes and back.
#include <memory>

#include "cachegen/cachegen_c.h"
#include "cachegen/container.h"
#include "cachegen/encode.h"
#include "capi/capi_buffers.h"
#include "capi/capi_status.h"

struct cachegen_reader {
  cachegen::CgkvReader reader;
};

namespace {

using cachegen::Error;
using cachegen::ErrorCode;
using cachegen::capi::need;

cachegen::KVDType kv_dtype(int dtype) {
  switch (dtype) {
    case CACHEGEN_DTYPE_F16:
      return cachegen::KVDType::f16;
    case CACHEGEN_DTYPE_BF16:
      return cachegen::KVDType::bf16;
    case CACHEGEN_DTYPE_F32:
      return cachegen::KVDType::f32;
    default:
      throw Error(ErrorCode::invalid_argument,
                  "dtype " + std::to_string(dtype) + " is not CACHEGEN_DTYPE_F16, _BF16 or _F32");
  }
}

cachegen::KVEncodeOptions encode_options(const cachegen_encode_options* c) {
  cachegen::KVEncodeOptions o;
  if (c == nullptr) return o;
  if (c->struct_size < sizeof(cachegen_encode_options)) {
    throw Error(ErrorCode::invalid_argument,
                "options->struct_size is not set (call cachegen_encode_options_init)");
  }
  o.bits = c->bits;
  o.layer_groups = c->layer_groups;
  o.group_size = c->group_size;
  o.chunk_tokens = c->chunk_tokens;
  if (c->level) o.level = c->level;
  o.params = c->reference_params ? "reference" : "compact";
  o.lossless = c->lossless != 0;
  o.rope_base = c->rope_base;
  o.rope_dims = c->rope_dims;
  o.rope_scale = c->rope_scale;
  o.rope_neox = c->rope_neox != 0;
  return o;
}

// layer(l) gives layer l's [2, n_tokens, n_kv_heads, head_dim] array.
template <typename LayerAt>
int encode(LayerAt layer, int dtype, size_t n_layers, size_t n_tokens, size_t n_kv_heads,
           size_t head_dim, const cachegen_encode_options* options, uint8_t** out,
           size_t* out_size) {
  return cachegen::capi::guard([&] {
    const cachegen::capi::BytesOut result(out, out_size);
    const size_t shape[] = {n_layers, 2, n_tokens, n_kv_heads, head_dim};
    const cachegen::ModelShape model =
        cachegen::kv_array_model_shape(shape, ErrorCode::invalid_argument, "kv");
    cachegen::KVArrayView kv;
    kv.dtype = kv_dtype(dtype);
    kv.n_tokens = n_tokens;
    kv.n_kv_heads = n_kv_heads;
    kv.head_dim = head_dim;
    for (size_t l = 0; l < n_layers; ++l) kv.layers.push_back(layer(l));
    std::vector<cachegen::CgkvBlob> blobs;
    if (options && options->n_token_ids) {
      need(options->token_ids, "options->token_ids");
      blobs.push_back(cachegen::token_ids_blob({options->token_ids, options->n_token_ids}));
    }
    result.set(cachegen::encode_kv_array(kv, model, encode_options(options), blobs));
  });
}

size_t element_bytes(int dtype) {
  return dtype == CACHEGEN_DTYPE_F32 ? 4 : 2;
}

void decode_range(const cachegen_reader* r, size_t begin, size_t end, size_t* elements) {
  const cachegen::CgkvInfo& info = r->reader.info();
  if (begin > end || end > info.n_tokens) {
    throw Error(ErrorCode::invalid_argument, "token range " + std::to_string(begin) + ":" +
                                                 std::to_string(end) +
                                                 " is outside 0:" + std::to_string(info.n_tokens));
  }
  *elements = static_cast<size_t>(info.n_attention_layers()) * 2 * (end - begin) *
              static_cast<size_t>(info.n_kv_heads) * static_cast<size_t>(info.head_dim);
}

template <typename Open>
int open_reader(cachegen_reader** out, Open open) {
  return cachegen::capi::guard([&] {
    need(out, "out");
    *out = nullptr;
    *out = new cachegen_reader{open()};
  });
}

}  // namespace

extern "C" {

void cachegen_encode_options_init(cachegen_encode_options* c) {
  if (c == nullptr) return;
  const cachegen::KVEncodeOptions o;
  *c = cachegen_encode_options{};
  c->struct_size = sizeof(cachegen_encode_options);
  c->bits = o.bits;
  c->layer_groups = o.layer_groups;
  c->group_size = o.group_size;
  c->chunk_tokens = o.chunk_tokens;
  c->rope_base = o.rope_base;
  c->rope_dims = o.rope_dims;
  c->rope_scale = o.rope_scale;
}

int cachegen_encode(const void* kv, int dtype, size_t n_layers, size_t n_tokens, size_t n_kv_heads,
                    size_t head_dim, const cachegen_encode_options* options, uint8_t** out,
                    size_t* out_size) {
  // Overflow of the layer stride is impossible within the shape limits (n_tokens <= 2^40,
  // heads and head_dim <= 2^16 would overflow: checked here before any pointer arithmetic).
  size_t layer_bytes = 0;
  const bool overflow =
      __builtin_mul_overflow(n_tokens, n_kv_heads, &layer_bytes) ||
      __builtin_mul_overflow(layer_bytes, head_dim, &layer_bytes) ||
      __builtin_mul_overflow(layer_bytes, 2 * element_bytes(dtype), &layer_bytes) ||
      __builtin_mul_overflow(layer_bytes, n_layers, &layer_bytes);
  return encode(
      [&](size_t l) -> const void* {
        if (overflow) throw Error(ErrorCode::invalid_argument, "kv: the array's size overflows");
        if (n_tokens != 0) need(kv, "kv");
        return static_cast<const uint8_t*>(kv) + l * (layer_bytes / n_layers);
      },
      dtype, n_layers, n_tokens, n_kv_heads, head_dim, options, out, out_size);
}

int cachegen_encode_layers(const void* const* layers, int dtype, size_t n_layers, size_t n_tokens,
                           size_t n_kv_heads, size_t head_dim,
                           const cachegen_encode_options* options, uint8_t** out,
                           size_t* out_size) {
  return encode(
      [&](size_t l) -> const void* {
        need(layers, "layers");
        if (n_tokens != 0) need(layers[l], "layers[l]");
        return layers[l];
      },
      dtype, n_layers, n_tokens, n_kv_heads, head_dim, options, out, out_size);
}

int cachegen_reader_open_bytes(const uint8_t* data, size_t size, cachegen_reader** out) {
  return open_reader(out, [&] {
    if (size) need(data, "data");
    return cachegen::CgkvReader::from_bytes(size ? std::vector<uint8_t>(data, data + size)
                                                 : std::vector<uint8_t>());
  });
}

int cachegen_reader_open_file(const char* path, cachegen_reader** out) {
  return open_reader(out, [&] {
    need(path, "path");
    return cachegen::CgkvReader::open_file(path);
  });
}

void cachegen_reader_free(cachegen_reader* reader) {
  delete reader;
}

int cachegen_reader_info(const cachegen_reader* r, cachegen_info* out) {
  return cachegen::capi::guard([&] {
    need(r, "reader");
    need(out, "info");
    if (out->struct_size < sizeof(cachegen_info))
      throw Error(ErrorCode::invalid_argument, "info->struct_size is not sizeof(cachegen_info)");
    const cachegen::CgkvInfo& i = r->reader.info();
    out->file_bytes = i.file_bytes;
    out->version = i.version;
    out->codec = static_cast<int>(i.codec);
    out->n_layers = static_cast<size_t>(i.n_layers);
    out->n_attention_layers = static_cast<size_t>(i.n_attention_layers());
    out->n_kv_heads = static_cast<size_t>(i.n_kv_heads);
    out->head_dim = static_cast<size_t>(i.head_dim);
    out->n_tokens = i.n_tokens;
    out->group_size = i.group_size;
    out->chunk_tokens = i.chunk_tokens;
    out->n_chunks = i.chunks.size();
  });
}

int cachegen_reader_inspect_json(const cachegen_reader* r, char** out_json) {
  return cachegen::capi::guard([&] {
    need(out_json, "out_json");
    *out_json = nullptr;
    need(r, "reader");
    const std::string json = cachegen::cgkv_inspect_json(r->reader);
    *out_json = reinterpret_cast<char*>(cachegen::capi::malloc_copy(
        {reinterpret_cast<const uint8_t*>(json.c_str()), json.size() + 1}));
  });
}

int cachegen_reader_decode_elements(const cachegen_reader* r, size_t begin, size_t end,
                                    size_t* out_elements) {
  return cachegen::capi::guard([&] {
    need(out_elements, "out_elements");
    *out_elements = 0;
    need(r, "reader");
    decode_range(r, begin, end, out_elements);
  });
}

int cachegen_reader_decode(const cachegen_reader* r, size_t begin, size_t end, uint16_t* out,
                           size_t out_len) {
  return cachegen::capi::guard([&] {
    need(r, "reader");
    size_t n = 0;
    decode_range(r, begin, end, &n);
    if (out_len < n) {
      throw Error(ErrorCode::output_too_small, "out holds " + std::to_string(out_len) +
                                                   " values; the range needs " + std::to_string(n));
    }
    if (n) need(out, "out");
    r->reader.read_tokens_into(
        begin, end, std::span<cachegen::Half>(reinterpret_cast<cachegen::Half*>(out), n));
  });
}

int cachegen_reader_verify(const cachegen_reader* r) {
  return cachegen::capi::guard([&] {
    need(r, "reader");
    r->reader.verify();
  });
}

}  // extern "C"
