// Size breakdown of an encoded stream against the per-channel empirical entropy.
#include <cmath>
#include <vector>

#include "cachegen/codec.h"
#include "codec/stream_format.h"

namespace cachegen {

double CodedSizeReport::code_ratio_over_entropy() const noexcept {
  if (code_entropy_bytes <= 0) return 0.0;
  return static_cast<double>(coded_bytes - param_bytes) / code_entropy_bytes;
}

namespace detail {

void add_head_size_report(const DecodedHead& h, CodedSizeReport& rep) {
  rep.header_bytes += h.header_bytes;
  rep.param_bytes += h.param_bytes;
  rep.model_bytes += h.model_bytes;
  rep.payload_bytes += h.payload_bytes;
  const size_t n_rows = h.stream.n_rows, dim = h.stream.dim;
  std::vector<uint32_t> counts(256);
  for (size_t c = 0; c < dim; ++c) {
    switch (h.models[c].kind) {
      case detail::ChannelKind::constant:
        ++rep.n_constant_channels;
        break;
      case detail::ChannelKind::uniform:
        ++rep.n_uniform_channels;
        break;
      case detail::ChannelKind::raw_table:
        ++rep.n_raw_channels;
        break;
      case detail::ChannelKind::delta_table:
        ++rep.n_delta_channels;
        break;
    }
    std::fill(counts.begin(), counts.end(), 0);
    for (size_t t = 0; t < n_rows; ++t) ++counts[h.symbols[t * dim + c]];
    for (uint32_t k : counts) {
      if (k == 0) continue;
      const double p = static_cast<double>(k) / static_cast<double>(n_rows);
      rep.code_entropy_bytes -= static_cast<double>(k) * std::log2(p) / 8.0;
    }
  }
}

}  // namespace detail

CodedSizeReport coded_size_report(std::span<const uint8_t> stream_bytes) {
  const auto body = detail::check_magic(stream_bytes, detail::kStreamMagic, "codec stream");
  CodedSizeReport rep;
  rep.coded_bytes = stream_bytes.size();
  rep.header_bytes = 5;
  detail::add_head_size_report(detail::decode_head(body, 5, DecodeOptions{}), rep);
  return rep;
}

}  // namespace cachegen
