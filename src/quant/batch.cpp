// Batched quantization over G independent heads, [G, n_rows, dim], one head per task.
#include <string>

#include "cachegen/quant.h"
#include "core/checks.h"
#include "core/parallel.h"

namespace cachegen {
namespace {

template <typename T>
void quantize_batch_impl(std::span<const T> x, size_t n_heads, size_t n_rows, size_t dim, int bits,
                         size_t group_size, std::vector<CodeStream>& out) {
  const size_t head = detail::checked_mul(n_rows, dim, "x (n_rows * dim)");
  const size_t want = detail::checked_mul(n_heads, head, "x (n_heads * n_rows * dim)");
  if (x.size() != want) {
    detail::invalid("x has " + std::to_string(x.size()) +
                    " values, expected n_heads * n_rows * dim = " + std::to_string(want));
  }
  out.resize(n_heads);
  detail::parallel_for(n_heads, [&](size_t h) {
    quantize_to_codes_into(x.subspan(h * head, head), n_rows, dim, bits, group_size, out[h]);
  });
}

template <typename T>
std::vector<CodeStream> quantize_batch_impl(std::span<const T> x, size_t n_heads, size_t n_rows,
                                            size_t dim, int bits, size_t group_size) {
  std::vector<CodeStream> out;
  quantize_batch_impl(x, n_heads, n_rows, dim, bits, group_size, out);
  return out;
}

}  // namespace

std::vector<CodeStream> quantize_to_codes_batch(std::span<const float> x, size_t n_heads,
                                                size_t n_rows, size_t dim, int bits,
                                                size_t group_size) {
  return quantize_batch_impl(x, n_heads, n_rows, dim, bits, group_size);
}
std::vector<CodeStream> quantize_to_codes_batch(std::span<const Half> x, size_t n_heads,
                                                size_t n_rows, size_t dim, int bits,
                                                size_t group_size) {
  return quantize_batch_impl(x, n_heads, n_rows, dim, bits, group_size);
}
std::vector<CodeStream> quantize_to_codes_batch(std::span<const BFloat16> x, size_t n_heads,
                                                size_t n_rows, size_t dim, int bits,
                                                size_t group_size) {
  return quantize_batch_impl(x, n_heads, n_rows, dim, bits, group_size);
}

void quantize_to_codes_batch_into(std::span<const Half> x, size_t n_heads, size_t n_rows,
                                  size_t dim, int bits, size_t group_size,
                                  std::vector<CodeStream>& out) {
  quantize_batch_impl(x, n_heads, n_rows, dim, bits, group_size, out);
}

void dequant_codes_batch_into(std::span<const CodeStream> streams, std::span<Half> out) {
  if (streams.empty() && out.empty()) return;
  if (streams.empty()) detail::invalid("dequant_codes_batch: no streams");
  const size_t n_rows = streams[0].n_rows, dim = streams[0].dim;
  for (size_t h = 0; h < streams.size(); ++h) {
    validate(streams[h]);
    if (streams[h].n_rows != n_rows || streams[h].dim != dim) {
      detail::invalid("streams[" + std::to_string(h) + "] has shape " +
                      std::to_string(streams[h].n_rows) + "x" + std::to_string(streams[h].dim) +
                      ", expected " + std::to_string(n_rows) + "x" + std::to_string(dim));
    }
  }
  const size_t head = n_rows * dim;
  if (out.size() != detail::checked_mul(streams.size(), head, "batch output")) {
    detail::fail(
        ErrorCode::output_too_small,
        "dequant_codes_batch: out has " + std::to_string(out.size()) +
            " values, expected G * n_rows * dim = " + std::to_string(streams.size() * head));
  }
  detail::parallel_for(streams.size(), [&](size_t h) {
    dequant_codes_into(streams[h], out.subspan(h * head, head));
  });
}

std::vector<Half> dequant_codes_batch(std::span<const CodeStream> streams) {
  if (streams.empty()) return {};
  const size_t head = detail::checked_mul(streams[0].n_rows, streams[0].dim, "batch output");
  std::vector<Half> out(detail::checked_mul(streams.size(), head, "batch output"));
  dequant_codes_batch_into(streams, out);
  return out;
}

size_t entropy_coded_bytes_batch(std::span<const CodeStream> streams, bool use_delta,
                                 bool per_channel) {
  std::vector<size_t> sizes(streams.size());
  detail::parallel_for(streams.size(), [&](size_t h) {
    sizes[h] = entropy_coded_bytes(streams[h], use_delta, per_channel);
  });
  size_t total = 0;
  for (size_t s : sizes) total = detail::checked_add(total, s, "batch size");
  return total;
}

size_t fixed_width_bytes_batch(std::span<const CodeStream> streams) {
  size_t total = 0;
  for (const CodeStream& s : streams)
    total = detail::checked_add(total, fixed_width_bytes(s), "batch size");
  return total;
}

std::vector<Half> cachegen_quant_dequant_batch(std::span<const float> x, size_t n_heads,
                                               size_t n_rows, size_t dim, int bits,
                                               size_t group_size) {
  return dequant_codes_batch(quantize_to_codes_batch(x, n_heads, n_rows, dim, bits, group_size));
}

}  // namespace cachegen
