// Lossless fp16 tensor data: byte planes + zstd.
#include <zstd.h>

#include <cstring>
#include <string>

#include "cachegen/error.h"
#include "container/cgkv_internal.h"

namespace cachegen::detail {

std::vector<uint8_t> pack_fp16_lossless(std::span<const Half> values, int zstd_level) {
  const size_t n = values.size();
  // Low bytes (mantissa bits, noisy) then high bytes (sign, exponent: repetitive): zstd models
  // each plane far better than the interleaved bytes.
  std::vector<uint8_t> planes(2 * n);
  for (size_t i = 0; i < n; ++i) {
    planes[i] = static_cast<uint8_t>(values[i].bits & 0xff);
    planes[n + i] = static_cast<uint8_t>(values[i].bits >> 8);
  }
  std::vector<uint8_t> out(ZSTD_compressBound(planes.size()));
  const size_t r = ZSTD_compress(out.data(), out.size(), planes.data(), planes.size(), zstd_level);
  if (ZSTD_isError(r)) {
    throw Error(ErrorCode::invalid_argument,
                std::string("zstd compression failed: ") + ZSTD_getErrorName(r));
  }
  out.resize(r);
  return out;
}

void unpack_fp16_lossless(std::span<const uint8_t> bytes, std::span<Half> out,
                          const std::string& context) {
  const size_t n = out.size();
  const unsigned long long declared = ZSTD_getFrameContentSize(bytes.data(), bytes.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR || declared == ZSTD_CONTENTSIZE_UNKNOWN ||
      declared != 2 * n) {
    throw Error(ErrorCode::corrupt_input,
                context + ": lossless frame does not declare " + std::to_string(2 * n) + " bytes");
  }
  std::vector<uint8_t> planes(2 * n);
  const size_t r = ZSTD_decompress(planes.data(), planes.size(), bytes.data(), bytes.size());
  if (ZSTD_isError(r) || r != planes.size()) {
    throw Error(ErrorCode::corrupt_input, context + ": lossless data does not decompress (" +
                                              (ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short") +
                                              ")");
  }
  for (size_t i = 0; i < n; ++i) {
    out[i].bits = static_cast<uint16_t>(planes[i] | (planes[n + i] << 8));
  }
}

}  // namespace cachegen::detail
