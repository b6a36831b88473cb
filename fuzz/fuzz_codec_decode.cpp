// Any bytes given to decode / decode_to_half / coded_size_report: a result or a
// cachegen::Error, never a crash, hang or unbounded allocation.
#include <cstddef>
#include <cstdint>

#include "cachegen/codec.h"
#include "cachegen/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  cachegen::DecodeOptions options;
  options.max_elements = size_t{1} << 20;
  try {
    const cachegen::CodeStream s = cachegen::decode(bytes, options);
    cachegen::validate(s);  // a successful decode is a valid stream
    (void)cachegen::decode_to_half(bytes, options);
    if (s.n_rows * s.dim < (size_t{1} << 20)) (void)cachegen::coded_size_report(bytes);
  } catch (const cachegen::Error&) {
  }
  return 0;
}
