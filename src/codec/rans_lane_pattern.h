// Internal: per-lane channel bases/shifts for the 32-lane SIMD decoders. Lane l of step k
// decodes element begin + 32k + l, whose channel repeats with period dim / gcd(dim, 32) steps,
// so the kernels load these rows instead of gathering per-lane channel data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "codec/rans.h"

namespace cachegen::detail {

struct LanePattern {
  size_t period = 0;                  // steps; 0 = too long to tabulate (kernels then decline)
  std::vector<uint32_t> base, shift;  // [period * 32]
};

inline LanePattern make_lane_pattern(const DecodeTables& t, size_t dim, size_t begin) {
  LanePattern p;
  const size_t period = dim / std::gcd(dim, size_t{kMaxLanes});
  if (period > 4096) return p;
  p.period = period;
  p.base.resize(period * kMaxLanes);
  p.shift.resize(period * kMaxLanes);
  for (size_t i = 0; i < period * kMaxLanes; ++i) {
    const size_t c = (begin + i) % dim;
    p.base[i] = t.base[c];
    p.shift[i] = t.shift[c];
  }
  return p;
}

}  // namespace cachegen::detail
