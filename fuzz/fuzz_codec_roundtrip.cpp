// Bytes -> a CodeStream (shape and codes from the input) -> encode -> decode must give it back
// (codes and the exact parameters, so re-encoding gives the same bytes) with every SIMD path,
// and encoding twice must give the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "cachegen/runtime.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const int bits = 1 + data[0] % 8;
  const size_t dim = 1 + data[1] % 40;
  const size_t group = 1 + data[2] % 64;
  const bool values = data[3] & 1;
  const bool twice = (data[3] & 6) == 0;
  data += 4;
  size -= 4;
  const size_t n_rows = size / dim;
  std::vector<float> x(n_rows * dim);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(static_cast<int8_t>(data[i])) * 0.37f;
  cachegen::CodeStream s;
  std::vector<uint8_t> bytes;
  if (values) {
    bytes = cachegen::encode_values(x, n_rows, dim, bits, group, {}, &s);
  } else {
    s = cachegen::quantize_to_codes(x, n_rows, dim, bits, group);
    bytes = cachegen::encode(s);
  }
  // Determinism: a second encode gives the same bytes (on a quarter of the inputs: the model
  // search dominates the run time, and the decode checks below cover every input).
  if (twice && (values ? cachegen::encode_values(x, n_rows, dim, bits, group)
                       : cachegen::encode(s)) != bytes)
    std::abort();
  for (cachegen::SimdPath p : {cachegen::SimdPath::scalar, cachegen::best_supported_simd_path()}) {
    cachegen::set_simd_path(p);
    const cachegen::CodeStream back = cachegen::decode(bytes);
    if (back.codes != s.codes || back.n_rows != s.n_rows || back.scale.size() != s.scale.size() ||
        (!s.scale.empty() &&
         (std::memcmp(back.scale.data(), s.scale.data(), s.scale.size() * 4) != 0 ||
          std::memcmp(back.zero.data(), s.zero.data(), s.zero.size() * 4) != 0)))
      std::abort();
  }
  return 0;
}
