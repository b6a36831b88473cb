// C API over the quantization layer.
#include <algorithm>
#include <memory>

#include "cachegen/cachegen_c.h"
#include "cachegen/quant.h"
#include "capi/capi_buffers.h"
#include "capi/capi_status.h"

struct cachegen_code_stream {
  cachegen::CodeStream stream;
};

namespace {

using cachegen::Error;
using cachegen::ErrorCode;

using cachegen::capi::need;

template <typename T>
int quantize(const T* x, size_t n_rows, size_t dim, int bits, size_t group_size,
             cachegen_code_stream** out) {
  return cachegen::capi::guard([&] {
    need(out, "out");
    *out = nullptr;
    if (n_rows * dim != 0) need(x, "x");
    size_t n;
    if (__builtin_mul_overflow(n_rows, dim, &n)) {
      throw Error(ErrorCode::invalid_argument, "n_rows * dim overflows");
    }
    auto s = std::make_unique<cachegen_code_stream>();
    s->stream =
        cachegen::quantize_to_codes(std::span<const T>(x, n), n_rows, dim, bits, group_size);
    *out = s.release();
  });
}

}  // namespace

extern "C" {

int cachegen_quantize_f32(const float* x, size_t n_rows, size_t dim, int bits, size_t group_size,
                          cachegen_code_stream** out) {
  return quantize(x, n_rows, dim, bits, group_size, out);
}

int cachegen_quantize_f16(const uint16_t* x, size_t n_rows, size_t dim, int bits, size_t group_size,
                          cachegen_code_stream** out) {
  return quantize(reinterpret_cast<const cachegen::Half*>(x), n_rows, dim, bits, group_size, out);
}

void cachegen_code_stream_free(cachegen_code_stream* stream) {
  delete stream;
}

size_t cachegen_code_stream_n_rows(const cachegen_code_stream* s) {
  return s ? s->stream.n_rows : 0;
}
size_t cachegen_code_stream_dim(const cachegen_code_stream* s) {
  return s ? s->stream.dim : 0;
}
int cachegen_code_stream_bits(const cachegen_code_stream* s) {
  return s ? s->stream.bits : 0;
}

int cachegen_code_stream_codes(const cachegen_code_stream* s, uint8_t* out, size_t out_len) {
  return cachegen::capi::guard([&] {
    need(s, "stream");
    const size_t n = s->stream.n_rows * s->stream.dim;
    if (out_len < n)
      throw Error(ErrorCode::output_too_small, "out holds fewer than n_rows * dim codes");
    if (n) need(out, "out");
    std::copy_n(s->stream.codes.begin(), n, out);
  });
}

int cachegen_dequant(const cachegen_code_stream* s, uint16_t* out, size_t out_len) {
  return cachegen::capi::guard([&] {
    need(s, "stream");
    const size_t n = s->stream.n_rows * s->stream.dim;
    if (out_len < n)
      throw Error(ErrorCode::output_too_small, "out holds fewer than n_rows * dim values");
    if (n) need(out, "out");
    cachegen::dequant_codes_into(
        s->stream, std::span<cachegen::Half>(reinterpret_cast<cachegen::Half*>(out), n));
  });
}

int cachegen_entropy_coded_bytes(const cachegen_code_stream* s, int use_delta, int per_channel,
                                 size_t* out_bytes) {
  return cachegen::capi::guard([&] {
    need(s, "stream");
    need(out_bytes, "out_bytes");
    *out_bytes = cachegen::entropy_coded_bytes(s->stream, use_delta != 0, per_channel != 0);
  });
}

int cachegen_fixed_width_bytes(const cachegen_code_stream* s, size_t* out_bytes) {
  return cachegen::capi::guard([&] {
    need(s, "stream");
    need(out_bytes, "out_bytes");
    *out_bytes = cachegen::fixed_width_bytes(s->stream);
  });
}

int cachegen_layer_group_bits(int n_layers, int base_bits, int n_groups, int* out, size_t out_len) {
  return cachegen::capi::guard([&] {
    const std::vector<int> bits = cachegen::layer_group_bits(n_layers, base_bits, n_groups);
    if (out_len < bits.size())
      throw Error(ErrorCode::output_too_small, "out holds fewer than n_layers entries");
    if (!bits.empty()) need(out, "out");
    std::copy(bits.begin(), bits.end(), out);
  });
}

}  // extern "C"
