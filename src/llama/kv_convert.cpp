// Element access to a layer's K/V rows through ggml's own type traits, so every ggml type
// llama.cpp can store (f32, f16, bf16, q8_0, q4_0, ...) converts the way llama.cpp does it.
#include <ggml-cpu.h>
#include <ggml.h>

#include <cstring>
#include <string>

#include "cachegen/error.h"
#include "cachegen/llama.h"

namespace cachegen::llama {
namespace {

const ggml_type_traits& traits(int32_t type) {
  if (type < 0 || type >= GGML_TYPE_COUNT) {
    throw Error(ErrorCode::invalid_argument, "llama KV: unknown ggml type " + std::to_string(type));
  }
  const ggml_type_traits* t = ggml_get_type_traits(static_cast<ggml_type>(type));
  // f32 has no to_float (it is the identity); every other storable type has one.
  if (t->blck_size <= 0 || t->type_size == 0 || (t->to_float == nullptr && type != GGML_TYPE_F32)) {
    throw Error(ErrorCode::invalid_argument,
                std::string("llama KV: ggml type ") + t->type_name + " cannot be converted");
  }
  return *t;
}

size_t row_elements(int32_t type, uint64_t row_bytes) {
  const ggml_type_traits& t = traits(type);
  return static_cast<size_t>(row_bytes / t.type_size * static_cast<uint64_t>(t.blck_size));
}

std::vector<float> to_float(int32_t type, uint64_t row_bytes, const std::vector<uint8_t>& data) {
  const ggml_type_traits& t = traits(type);
  const size_t n_rows = row_bytes == 0 ? 0 : data.size() / row_bytes;
  const size_t per_row = row_elements(type, row_bytes);
  std::vector<float> out(n_rows * per_row);
  if (type == GGML_TYPE_F32) {
    std::memcpy(out.data(), data.data(), out.size() * sizeof(float));
    return out;
  }
  for (size_t r = 0; r < n_rows; ++r) {
    t.to_float(data.data() + r * row_bytes, out.data() + r * per_row,
               static_cast<int64_t>(per_row));
  }
  return out;
}

void from_float(int32_t type, uint64_t row_bytes, std::span<const float> values,
                std::vector<uint8_t>& data) {
  const size_t n_rows = row_bytes == 0 ? 0 : data.size() / row_bytes;
  const size_t per_row = row_elements(type, row_bytes);
  if (values.size() != n_rows * per_row) {
    throw Error(ErrorCode::invalid_argument, "llama KV: " + std::to_string(values.size()) +
                                                 " values for " + std::to_string(n_rows) +
                                                 " rows of " + std::to_string(per_row));
  }
  ggml_cpu_init();  // quantize_chunk needs ggml's fp16 tables
  const size_t written =
      ggml_quantize_chunk(static_cast<ggml_type>(type), values.data(), data.data(), 0,
                          static_cast<int64_t>(n_rows), static_cast<int64_t>(per_row), nullptr);
  if (written != data.size()) {
    throw Error(ErrorCode::invalid_argument, "llama KV: ggml wrote an unexpected row size");
  }
}

}  // namespace

size_t k_row_elements(const KvLayer& layer) {
  return row_elements(layer.k_type, layer.k_row_bytes);
}
size_t v_row_elements(const KvLayer& layer) {
  return row_elements(layer.v_type, layer.v_row_bytes);
}

std::vector<float> layer_k_float(const KvLayer& layer) {
  return to_float(layer.k_type, layer.k_row_bytes, layer.k);
}
std::vector<float> layer_v_float(const KvLayer& layer) {
  return to_float(layer.v_type, layer.v_row_bytes, layer.v);
}
void set_layer_k_float(KvLayer& layer, std::span<const float> values) {
  from_float(layer.k_type, layer.k_row_bytes, values, layer.k);
}
void set_layer_v_float(KvLayer& layer, std::span<const float> values) {
  from_float(layer.v_type, layer.v_row_bytes, values, layer.v);
}

}  // namespace cachegen::llama
