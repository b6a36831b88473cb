// Scalar rANS encoder. There is one encoder for every SIMD path: decoders must match its
// bytes, so the output is path-independent by construction.
#include <cstring>

#include "codec/rans.h"

namespace cachegen::detail {

void rans_encode(std::span<const uint8_t> symbols, size_t dim,
                 std::span<const ChannelTable> channels, int precision, int n_lanes,
                 std::vector<uint8_t>& out) {
  const size_t n = symbols.size();
  // Per channel, per symbol: frequency and start already scaled to the stream precision.
  const size_t n_syms = channels.empty() ? 0 : channels[0].freq.size();
  std::vector<uint32_t> freq(dim * n_syms), start(dim * n_syms);
  for (size_t c = 0; c < dim; ++c) {
    const int up = precision - channels[c].t;
    for (size_t s = 0; s < n_syms; ++s) {
      freq[c * n_syms + s] = static_cast<uint32_t>(channels[c].freq[s]) << up;
      start[c * n_syms + s] = static_cast<uint32_t>(channels[c].cum[s]) << up;
    }
  }
  uint32_t x[kMaxLanes];
  for (int l = 0; l < n_lanes; ++l) x[l] = kRansLow;
  std::vector<uint16_t> reversed_words;
  reversed_words.reserve(n / 2 + 16);
  const uint64_t x_max_unit = static_cast<uint64_t>(kRansLow >> precision) << 16;
  size_t lane = n == 0 ? 0 : (n - 1) % static_cast<size_t>(n_lanes);
  size_t channel = n == 0 ? 0 : (n - 1) % dim;
  for (size_t i = n; i-- > 0;) {
    const size_t k = channel * n_syms + symbols[i];
    const uint32_t f = freq[k];
    uint32_t s = x[lane];
    if (s >= x_max_unit * f) {
      reversed_words.push_back(static_cast<uint16_t>(s));
      s >>= 16;
    }
    x[lane] = ((s / f) << precision) + (s % f) + start[k];
    lane = lane == 0 ? static_cast<size_t>(n_lanes) - 1 : lane - 1;
    channel = channel == 0 ? dim - 1 : channel - 1;
  }
  for (int l = 0; l < n_lanes; ++l) {
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<uint8_t>(x[l] >> (8 * b)));
  }
  for (size_t w = reversed_words.size(); w-- > 0;) {
    out.push_back(static_cast<uint8_t>(reversed_words[w]));
    out.push_back(static_cast<uint8_t>(reversed_words[w] >> 8));
  }
}

}  // namespace cachegen::detail
