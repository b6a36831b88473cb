// Internal: per-lane channel data for the 32-lane SIMD decoders. Lane l of step k decodes
// element begin + 32k + l, whose channel repeats with period dim / gcd(dim, 32) steps, so the
// kernels load these rows instead of gathering per-lane channel data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "codec/rans.h"

namespace cachegen::detail {

// Longest tabulated period (steps); longer ones (dim with a large odd factor) make kernels
// decline and leave the work to the scalar kernel.
inline constexpr size_t kMaxLanePeriod = 4096;
// Lanes of the narrow kernels (payloads of 4 K..16 K elements, see choose_lanes).
inline constexpr size_t kNarrowLanes = 8;

// Steps after which the channels of `lanes` consecutive elements repeat; 0 = too long.
inline size_t lane_period(size_t dim, size_t lanes = size_t{kMaxLanes}) {
  const size_t period = dim / std::gcd(dim, lanes);
  return period > kMaxLanePeriod ? 0 : period;
}

// Slot-table kernels (alphabets above kMaxSearchSymbols).
struct LanePattern {
  size_t period = 0;                  // steps; 0 = too long to tabulate (kernels then decline)
  std::vector<uint32_t> base, shift;  // [period * 32]
};

// `lanes` per step: kMaxLanes, or kNarrowLanes for the 8-lane kernels.
inline LanePattern make_lane_pattern(const DecodeTables& t, size_t dim, size_t begin,
                                     size_t lanes = kMaxLanes) {
  LanePattern p;
  const size_t period = lane_period(dim, lanes);
  if (period == 0) return p;
  p.period = period;
  p.base.resize(period * lanes);
  p.shift.resize(period * lanes);
  for (size_t i = 0; i < period * lanes; ++i) {
    const size_t c = (begin + i) % dim;
    p.base[i] = t.base[c];
    p.shift[i] = t.shift[c];
  }
  return p;
}

// Search kernels: for step k and threshold j (1..n_syms-1), the 32 lanes' cumulative starts
// cum[channel(lane)][j] as u16 at thresholds[(k * (n_syms - 1) + j - 1) * 32 + position], in
// the order the kernels hold slots. A kernel with state vectors of `width` u32 lanes pairs
// vectors v, v + 1 (v even) into one u16 vector (x_v & mask) | (x_{v+1} & mask) << 16: lane l
// sits at position (l / 2w) * 2w + 2 (l % w) + (l / w) % 2 (AVX-512, w = 16: lanes 0..15 even,
// 16..31 odd). Why: results split back by a mask and a shift (1 cycle each) instead of
// lane-crossing packs and widenings on the decoder's dependency chain.
struct ThresholdPattern {
  size_t period = 0;
  int n_thresholds = 0;
  std::vector<uint16_t> thresholds;
};

inline ThresholdPattern build_threshold_pattern(const DecodeTables& t, size_t dim, size_t begin,
                                                size_t width) {
  ThresholdPattern p;
  const size_t period = lane_period(dim);
  if (period == 0) return p;
  p.period = period;
  p.n_thresholds = t.n_syms - 1;
  const size_t nt = static_cast<size_t>(p.n_thresholds), stride = static_cast<size_t>(t.n_syms) + 1;
  p.thresholds.resize(period * nt * kMaxLanes);
  // Channels of the tabulated elements, counted up (kernels build this per call; a division
  // per entry showed in profiles of short payloads).
  std::vector<uint32_t> channel(period * kMaxLanes);
  for (size_t e = 0, c = begin % dim; e < channel.size(); ++e) {
    channel[e] = static_cast<uint32_t>(c);
    if (++c == dim) c = 0;
  }
  for (size_t k = 0; k < period; ++k)
    for (size_t j = 0; j < nt; ++j)
      for (size_t l = 0; l < size_t{kMaxLanes}; ++l) {
        const size_t c = channel[k * kMaxLanes + l];
        const size_t position = (l / (2 * width)) * 2 * width + 2 * (l % width) + (l / width) % 2;
        p.thresholds[(k * nt + j) * kMaxLanes + position] = t.cum[c * stride + j + 1];
      }
  return p;
}

// u32 thresholds for kernels whose lanes are one vector of u32 states (no pairing).
struct ThresholdPattern32 {
  size_t period = 0;
  int n_thresholds = 0;
  std::vector<uint32_t> thresholds;
};

// The pattern for these tables, reused across calls on this thread: a batch's slices (and
// each payload's paired, single and padded-tail kernel calls) share one, and building it per
// call showed in profiles of short payloads. The cache is keyed by the tables' contents, not
// their address. The reference stays valid until this thread's next call.
inline const ThresholdPattern& make_threshold_pattern(const DecodeTables& t, size_t dim,
                                                      size_t begin, size_t width) {
  struct Cache {
    std::vector<uint16_t> cum;
    size_t dim = 0, phase = 0, width = 0;
    int precision = -1;
    ThresholdPattern pattern;
  };
  thread_local Cache cache;
  const size_t phase = dim == 0 ? 0 : begin % dim;
  if (cache.dim != dim || cache.phase != phase || cache.width != width ||
      cache.precision != t.precision || cache.cum != t.cum) {
    cache.pattern = build_threshold_pattern(t, dim, begin, width);
    cache.cum = t.cum;
    cache.dim = dim;
    cache.phase = phase;
    cache.width = width;
    cache.precision = t.precision;
  }
  return cache.pattern;
}

// The 8-lane search kernel (payloads of 4 K..16 K elements, see choose_lanes): for step k and
// threshold j, the 8 lanes' cumulative starts cum[channel(lane)][j] as u32 at
// thresholds[(k * (n_syms - 1) + j - 1) * 8 + lane], lane l of step k decoding element
// begin + 8k + l. Cached per thread like make_threshold_pattern.
inline const ThresholdPattern32& make_narrow_pattern(const DecodeTables& t, size_t dim,
                                                     size_t begin) {
  struct Cache {
    std::vector<uint16_t> cum;
    size_t dim = 0, phase = 0;
    int precision = -1;
    ThresholdPattern32 pattern;
  };
  thread_local Cache cache;
  const size_t phase = dim == 0 ? 0 : begin % dim;
  if (cache.dim == dim && cache.phase == phase && cache.precision == t.precision &&
      cache.cum == t.cum)
    return cache.pattern;
  ThresholdPattern32& p = cache.pattern;
  p = ThresholdPattern32{};
  const size_t period = lane_period(dim, kNarrowLanes);
  if (period > 0) {
    p.period = period;
    p.n_thresholds = t.n_syms - 1;
    const size_t nt = static_cast<size_t>(p.n_thresholds);
    const size_t stride = static_cast<size_t>(t.n_syms) + 1;
    p.thresholds.resize(period * nt * kNarrowLanes);
    for (size_t k = 0, c = phase; k < period; ++k)
      for (size_t l = 0; l < kNarrowLanes; ++l) {
        for (size_t j = 0; j < nt; ++j)
          p.thresholds[(k * nt + j) * kNarrowLanes + l] = t.cum[c * stride + j + 1];
        if (++c == dim) c = 0;
      }
  }
  cache.cum = t.cum;
  cache.dim = dim;
  cache.phase = phase;
  cache.precision = t.precision;
  return p;
}

}  // namespace cachegen::detail
