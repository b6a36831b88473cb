// Any bytes given to decode_batch / decode_batch_to_half.
#include <cstddef>
#include <cstdint>

#include "cachegen/codec.h"
#include "cachegen/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  cachegen::DecodeOptions options;
  options.max_elements = size_t{1} << 18;
  try {
    (void)cachegen::decode_batch(bytes, options);
    (void)cachegen::decode_batch_to_half(bytes, options);
  } catch (const cachegen::Error&) {
  }
  return 0;
}
