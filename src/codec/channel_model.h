// Internal: per-channel probability models, their compact description and the encoder's choice.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "codec/bit_io.h"
#include "codec/rans.h"

namespace cachegen::detail {

// Frozen in the format (2-bit field).
enum class ChannelKind : uint8_t {
  constant = 0,     // every code equals one symbol; costs nothing per element
  uniform = 1,      // every code costs exactly `bits` bits (fixed-width packing through rANS)
  raw_table = 2,    // frequency table over codes
  delta_table = 3,  // frequency table over token deltas mod 2^bits
};

struct ChannelModel {
  ChannelKind kind = ChannelKind::uniform;
  uint8_t constant_symbol = 0;
  int eg_k = 0;          // Exp-Golomb order of the frequency list (table kinds)
  ChannelTable table;    // the coder's view (filled for every kind)
  uint64_t cost_fp = 0;  // encoder's estimate of description + data bits, 16.16 fixed point
};

// c * log2(c) of counts: below kClogTable from a table built once (callers fetch its pointer
// once: a function-local static's guard per value was a cost), past it computed.
inline constexpr uint32_t kClogTable = 4096;
const double* count_log2_count_table();
inline double count_log2_count(const double* table, uint64_t c) {
  return c < kClogTable ? table[c] : static_cast<double>(c) * std::log2(static_cast<double>(c));
}

// Largest table precision a stream of n_rows rows may use: min(12, max(1, ceil(log2 n_rows)+1)).
// Bounding it by the row count bounds decoder table memory by the element count.
int max_table_precision(size_t n_rows);

// log2(v) in 16.16 fixed point for v in 1..4096, computed with integer arithmetic only so
// that encoder decisions are identical on every machine.
uint32_t log2_fixed(uint32_t v);

// Picks the cheapest model for one channel given the symbol histograms (each 2^bits long) of
// its raw codes and of its token deltas (delta_counts empty = delta not allowed).
ChannelModel choose_channel_model(std::span<const uint32_t> raw_counts,
                                  std::span<const uint32_t> delta_counts, size_t n_rows, int bits);
// The same into `model`, reusing its tables' storage (encoders keep models between batches
// instead of allocating two vectors per channel).
void choose_channel_model(std::span<const uint32_t> raw_counts,
                          std::span<const uint32_t> delta_counts, size_t n_rows, int bits,
                          ChannelModel& model);

// choose_channel_model(...).cost_fp without building the model (estimates).
uint64_t channel_model_cost(std::span<const uint32_t> raw_counts,
                            std::span<const uint32_t> delta_counts, size_t n_rows, int bits);

// A lower bound on choose_channel_model(...).cost_fp for the same arguments (exact for a
// constant channel), far cheaper than the search: it proves some choices without it.
uint64_t channel_cost_lower_bound(std::span<const uint32_t> raw_counts,
                                  std::span<const uint32_t> delta_counts, size_t n_rows, int bits);
// The same for n_channels channels at once (the encoder's plan takes it for every channel of
// every head): channel c's histograms at raw_counts / delta_counts + c * 2^bits (delta_counts
// null = delta not allowed), its bound into bounds[c].
void channel_cost_lower_bounds(const uint32_t* raw_counts, const uint32_t* delta_counts,
                               size_t n_channels, size_t n_rows, int bits, uint64_t* bounds);
// What the lower bound needs of one histogram.
struct BoundParts {
  double sum_clog;  // the sum of c log2 c over its counts (count_log2_count)
  uint64_t total;
  uint32_t n, last;  // present symbols, the largest list place of one (0 if none)
};
// BoundParts of 8 channels of 8 symbols (counts channel after channel), place[s] symbol s's
// list place; false (nothing written) where a count reaches kClogTable.
bool bound_parts8_avx512(const uint32_t* counts, const double* clog, const uint8_t* place,
                         BoundParts* parts);

void write_channel_model(BitWriter& w, const ChannelModel& model, int bits);
// Reads and validates one model (corrupt_input on an impossible table) into `model`, reusing
// its tables' storage (decoders keep models between tensors instead of allocating per channel).
void read_channel_model(BitReader& r, int bits, size_t n_rows, ChannelModel& model);

// Symbol order of the frequency list: raw tables list codes 0..2^bits-1; delta tables list
// signed deltas 0, -1, +1, -2, ... (mod 2^bits), so that the common small deltas come first.
inline uint32_t table_order_symbol(ChannelKind kind, uint32_t index, int bits) {
  if (kind != ChannelKind::delta_table) return index;
  const int32_t signed_delta =
      (index & 1) ? -static_cast<int32_t>((index + 1) >> 1) : static_cast<int32_t>(index >> 1);
  return static_cast<uint32_t>(signed_delta) & ((1u << bits) - 1);
}

}  // namespace cachegen::detail
