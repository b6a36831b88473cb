// Internal: per-lane channel data for the SIMD decoders. Lane l of step k decodes element
// lanes * k + l (from `begin` for slot-table patterns, from 0 for the cached search patterns),
// whose channel repeats with period dim / gcd(dim, lanes) steps, so the kernels load these rows
// instead of gathering per-lane channel data. Built in rans_lane_pattern.cpp, compiled for the
// baseline CPU: the kernels' files are compiled for AVX2 or AVX-512, and an inline function
// they share may be linked from either file's copy.
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
  std::vector<uint32_t> base, shift;  // [period * lanes]
};
// `lanes` per step: kMaxLanes, or kNarrowLanes for the 8-lane kernels; from element `begin`.
LanePattern make_lane_pattern(const DecodeTables& t, size_t dim, size_t begin,
                              size_t lanes = kMaxLanes);
// Whether every lane of the pattern reads its table at its slot (base 0, shift 0): one channel
// at the coder's precision (the lossless tier's pooled high planes and rotation residuals). The
// kernels' flat steps skip a load, a variable shift and an add on the chain each step waits for.
bool is_flat(const LanePattern& p);

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

// The 8-lane search kernels (payloads of 4 K..16 K elements, see choose_lanes): for step k and
// threshold j, the 8 lanes' cumulative starts cum[channel(lane)][j] as u32 at
// thresholds[(k * (n_syms - 1) + j - 1) * 8 + lane], lane l of step k decoding element 8k + l.
// Built for 4-lane payloads (512..4 K elements), the first 4 lanes of step k decode elements
// 4k + l and the other 4 are idle: thresholds 2^precision.
struct ThresholdPattern32 {
  size_t period = 0;
  int n_thresholds = 0;
  std::vector<uint32_t> thresholds;
};

// The search patterns for these tables, from element 0 of a payload, cached per thread: four
// entries keyed by the tables' contents (not their address), so that a batch's slices (and each
// payload's paired, single and padded-tail kernel calls) share one — building one per call
// showed in profiles of short payloads — and the payloads of a lockstep pair or quad with
// different tables keep theirs. A miss replaces the entry used least recently: a reference stays
// valid until the fourth miss after it.
const ThresholdPattern& make_threshold_pattern(const DecodeTables& t, size_t dim, size_t width);
const ThresholdPattern32& make_narrow_pattern(const DecodeTables& t, size_t dim,
                                              size_t lanes = kNarrowLanes);

// A kernel decoding from element `begin` (a multiple of its lanes) starts at this step of a
// pattern built from element 0, so the calls that finish a payload find its first call's pattern.
inline size_t pattern_step(size_t begin, size_t lanes, size_t period) {
  return period == 0 ? 0 : (begin / lanes) % period;
}

}  // namespace cachegen::detail
