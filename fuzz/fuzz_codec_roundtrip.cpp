// Bytes -> a CodeStream (shape and codes from the input) -> encode -> decode must give it back
// (codes and the exact parameters, so re-encoding gives the same bytes) with every SIMD path,
// and encoding twice must give the same bytes. Wide inputs (a header bit) tile their rows to at
// least 16,384 values, so that the encoders' 32-lane kernels run (shorter streams take 8 lanes
// or fewer), and must encode to the scalar encoder's bytes.
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
  const bool wide = data[3] & 8;
  data += 4;
  size -= 4;
  size_t n_rows = size / dim;
  const size_t n = n_rows * dim;
  const size_t copies = wide && n > 0 ? (16384 + n - 1) / n : 1;  // odd copies negated
  std::vector<float> x(n * copies);
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = static_cast<float>(static_cast<int8_t>(data[i % n])) * 0.37f;
    x[i] = (i / n) % 2 ? -v : v;
  }
  n_rows *= copies;
  cachegen::CodeStream s;
  std::vector<uint8_t> bytes;
  if (values) {
    bytes = cachegen::encode_values(x, n_rows, dim, bits, group, {}, &s);
  } else {
    s = cachegen::quantize_to_codes(x, n_rows, dim, bits, group);
    bytes = cachegen::encode(s);
  }
  if (wide) {
    cachegen::set_simd_path(cachegen::SimdPath::scalar);
    const std::vector<uint8_t> scalar =
        values ? cachegen::encode_values(x, n_rows, dim, bits, group) : cachegen::encode(s);
    cachegen::set_simd_path(cachegen::best_supported_simd_path());
    if (scalar != bytes) std::abort();
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
