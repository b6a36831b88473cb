// Any bytes given to decode_batch / decode_batch_to_half (both forms) / decode_batch_to_rows, on
// every SIMD path the CPU has: each path must return the same codes and halves, or fail with the
// same error code (the AVX-512 decoder pairs slices and finishes payloads through padded copies;
// the others do not); rows must be the halves transposed, and decode_batches_to_rows of the batch
// twice (four times) the same rows twice (four times).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "cachegen/runtime.h"

namespace {

struct Outcome {
  int error = -1;  // ErrorCode of a failure, -1 on success
  std::vector<uint8_t> codes;
  std::vector<uint16_t> halves;
  bool operator==(const Outcome&) const = default;
};

Outcome run(std::span<const uint8_t> bytes, const cachegen::DecodeOptions& options) {
  Outcome o;
  std::vector<cachegen::CodeStream> heads;
  try {
    heads = cachegen::decode_batch(bytes, options);
    for (const auto& s : heads) o.codes.insert(o.codes.end(), s.codes.begin(), s.codes.end());
  } catch (const cachegen::Error& e) {
    o.error = static_cast<int>(e.code());
    return o;
  }
  try {
    for (cachegen::Half h : cachegen::decode_batch_to_half(bytes, options))
      o.halves.push_back(h.bits);
  } catch (const cachegen::Error& e) {
    o.error = 1000 + static_cast<int>(e.code());  // fp16 needs one shape: may fail alone
    return o;
  }
  // Into a caller's buffer of that size: the same halves, every one written.
  std::vector<cachegen::Half> into(o.halves.size(), cachegen::Half{0xffff});
  cachegen::decode_batch_to_half(bytes, into, options);
  for (size_t i = 0; i < into.size(); ++i)
    if (into[i].bits != o.halves[i]) std::abort();
  if (heads.empty()) return o;
  // The same batch into token-major rows: the halves transposed; another shape is refused.
  const cachegen::CodeStream& h0 = heads[0];
  const cachegen::BatchShape shape{heads.size(), h0.n_rows, h0.dim, h0.bits, h0.group_size};
  std::vector<cachegen::Half> rows(o.halves.size());
  bool one_shape = true;
  for (const auto& s : heads)
    one_shape = one_shape && s.bits == h0.bits && s.group_size == h0.group_size;
  try {
    cachegen::decode_batch_to_rows(bytes, shape, rows, options);
    if (!one_shape) std::abort();
  } catch (const cachegen::Error& e) {
    if (one_shape || e.code() != cachegen::ErrorCode::corrupt_input) std::abort();
    return o;
  }
  for (size_t h = 0; h < shape.n_heads; ++h)
    for (size_t t = 0; t < shape.n_rows; ++t)
      for (size_t c = 0; c < shape.dim; ++c) {
        if (rows[(t * shape.n_heads + h) * shape.dim + c].bits !=
            o.halves[(h * shape.n_rows + t) * shape.dim + c])
          std::abort();
      }
  // Two and four batches at once (decode_batches_to_rows decodes their payloads in pairs and,
  // 8-lane ones, in fours): the same rows each time.
  std::vector<cachegen::Half> copies[4];
  for (auto& c : copies) c.assign(rows.size(), cachegen::Half{});
  const cachegen::BatchRows jobs[4] = {{bytes, shape, copies[0]},
                                       {bytes, shape, copies[1]},
                                       {bytes, shape, copies[2]},
                                       {bytes, shape, copies[3]}};
  for (size_t n : {2, 4}) {
    cachegen::decode_batches_to_rows(std::span<const cachegen::BatchRows>(jobs, n), options);
    for (size_t k = 0; k < n; ++k)
      for (size_t i = 0; i < rows.size(); ++i)
        if (copies[k][i].bits != rows[i].bits) std::abort();
  }
  cachegen::BatchShape other = shape;
  other.bits = shape.bits % 8 + 1;
  try {
    cachegen::decode_batch_to_rows(bytes, other, rows, options);
    std::abort();
  } catch (const cachegen::Error& e) {
    if (e.code() != cachegen::ErrorCode::corrupt_input) std::abort();
  }
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  cachegen::DecodeOptions options;
  options.max_elements = size_t{1} << 18;
  // One thread: with several, which of two damaged slices reports first depends on timing.
  cachegen::set_thread_count(1);
  const cachegen::SimdPath best = cachegen::best_supported_simd_path();
  cachegen::set_simd_path(cachegen::SimdPath::scalar);
  const Outcome reference = run(bytes, options);
  for (int p = 1; p <= static_cast<int>(best); ++p) {
    cachegen::set_simd_path(static_cast<cachegen::SimdPath>(p));
    if (!(run(bytes, options) == reference)) std::abort();
  }
  cachegen::set_simd_path(best);
  return 0;
}
