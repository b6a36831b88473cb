// Lane patterns of the SIMD rANS decoders (rans_lane_pattern.h), compiled for the baseline CPU.
#include "codec/rans_lane_pattern.h"

namespace cachegen::detail {
namespace {

void build_threshold_pattern(const DecodeTables& t, size_t dim, size_t width, ThresholdPattern& p) {
  p.period = 0;
  const size_t period = lane_period(dim);
  if (period == 0) return;
  p.period = period;
  p.n_thresholds = t.n_syms - 1;
  const size_t nt = static_cast<size_t>(p.n_thresholds), stride = static_cast<size_t>(t.n_syms) + 1;
  p.thresholds.resize(period * nt * kMaxLanes);
  // Each lane's position in the vector (the lane order the kernel's u16 packing wants) and
  // channel, computed once: per entry, the divisions showed in profiles of short payloads.
  uint32_t position[kMaxLanes];
  for (size_t l = 0; l < size_t{kMaxLanes}; ++l)
    position[l] =
        static_cast<uint32_t>((l / (2 * width)) * 2 * width + 2 * (l % width) + (l / width) % 2);
  const uint16_t* const cum = t.cum.data() + 1;
  uint16_t* const out = p.thresholds.data();
  // A step's lanes' rows of cum, then its thresholds a row of 32 at a time (as
  // build_narrow_pattern).
  for (size_t k = 0, c = 0; k < period; ++k) {
    const uint16_t* row[kMaxLanes];
    for (size_t l = 0; l < size_t{kMaxLanes}; ++l) {
      row[l] = cum + c * stride;
      if (++c == dim) c = 0;
    }
    for (size_t j = 0; j < nt; ++j) {
      uint16_t* const to = out + (k * nt + j) * kMaxLanes;
      for (size_t l = 0; l < size_t{kMaxLanes}; ++l) to[position[l]] = row[l][j];
    }
  }
}

void build_narrow_pattern(const DecodeTables& t, size_t dim, size_t lanes, ThresholdPattern32& p) {
  p.period = 0;
  const size_t period = lane_period(dim, lanes);
  if (period == 0) return;
  p.period = period;
  p.n_thresholds = t.n_syms - 1;
  const size_t nt = static_cast<size_t>(p.n_thresholds);
  const size_t stride = static_cast<size_t>(t.n_syms) + 1;
  const uint32_t top = 1u << t.precision;  // idle lanes' thresholds
  p.thresholds.resize(period * nt * kNarrowLanes);
  uint32_t* const out = p.thresholds.data();
  const uint16_t* const cum = t.cum.data() + 1;
  // A step's lanes' rows of cum (idle lanes: none), then its thresholds a row of 8 lanes at a
  // time (contiguous stores; lane by lane they were 8 elements apart: a short payload's pattern
  // showed in profiles of 64-token chunk decodes).
  for (size_t k = 0, c = 0; k < period; ++k) {
    const uint16_t* row[kNarrowLanes];
    for (size_t l = 0; l < kNarrowLanes; ++l) {
      row[l] = l < lanes ? cum + c * stride : nullptr;
      if (l < lanes && ++c == dim) c = 0;
    }
    for (size_t j = 0; j < nt; ++j) {
      uint32_t* const to = out + (k * nt + j) * kNarrowLanes;
      for (size_t l = 0; l < kNarrowLanes; ++l) to[l] = row[l] ? row[l][j] : top;
    }
  }
}

// Four patterns per thread (make_threshold_pattern), the least recently used replaced: the
// four payloads of a lockstep quad each hold one.
template <typename Pattern>
struct PatternCache {
  static constexpr int kEntries = 4;
  struct Entry {
    std::vector<uint16_t> cum;
    size_t dim = 0, width = 0;
    int precision = -1;
    uint64_t used = 0;  // the use count when last returned
    Pattern pattern;
  };
  Entry entries[kEntries];
  uint64_t uses = 0;
  // The entry for these keys, rebuilt by build(pattern) on a miss.
  template <typename Build>
  const Pattern& get(const DecodeTables& t, size_t dim, size_t width, Build&& build) {
    int oldest = 0;
    for (int e = 0; e < kEntries; ++e) {
      Entry& c = entries[e];
      if (c.dim == dim && c.width == width && c.precision == t.precision && c.cum == t.cum) {
        c.used = ++uses;
        return c.pattern;
      }
      if (c.used < entries[oldest].used) oldest = e;
    }
    Entry& c = entries[oldest];
    build(c.pattern);
    c.cum = t.cum;
    c.dim = dim;
    c.width = width;
    c.precision = t.precision;
    c.used = ++uses;
    return c.pattern;
  }
};

}  // namespace

bool is_flat(const LanePattern& p) {
  for (size_t l = 0; l < p.base.size(); ++l)
    if (p.base[l] != 0 || p.shift[l] != 0) return false;
  return true;
}

LanePattern make_lane_pattern(const DecodeTables& t, size_t dim, size_t begin, size_t lanes) {
  LanePattern p;
  const size_t period = lane_period(dim, lanes);
  if (period == 0) return p;
  p.period = period;
  p.base.resize(period * lanes);
  p.shift.resize(period * lanes);
  // Channels by a counter (a division per lane was most of this function: 2.5% of a lossless
  // decode of stories260K, whose short payloads each build a pattern).
  for (size_t i = 0, c = begin % dim; i < period * lanes; ++i) {
    p.base[i] = t.base[c];
    p.shift[i] = t.shift[c];
    if (++c == dim) c = 0;
  }
  return p;
}

const ThresholdPattern& make_threshold_pattern(const DecodeTables& t, size_t dim, size_t width) {
  thread_local PatternCache<ThresholdPattern> cache;
  return cache.get(t, dim, width,
                   [&](ThresholdPattern& p) { build_threshold_pattern(t, dim, width, p); });
}

const ThresholdPattern32& make_narrow_pattern(const DecodeTables& t, size_t dim, size_t lanes) {
  thread_local PatternCache<ThresholdPattern32> cache;
  return cache.get(t, dim, lanes,
                   [&](ThresholdPattern32& p) { build_narrow_pattern(t, dim, lanes, p); });
}

}  // namespace cachegen::detail
