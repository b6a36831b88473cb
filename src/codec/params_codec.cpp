#include "codec/params_codec.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "cachegen/half.h"

namespace cachegen::detail {
namespace {

constexpr int64_t kMaxZeroIndex = int64_t{1} << 40;
constexpr int kMaxEgOrder = 31;
// The longest Exp-Golomb prefix BitReader::exp_golomb accepts (bit_io.cpp).
constexpr int kMaxEgPrefix = 40;

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Nearest integer to a/b in int64, saturated; 0 for NaN.
int64_t predict_index(float value, float step) {
  const float q = value / step;
  if (!(q == q)) return 0;
  if (q > 1e15f) return static_cast<int64_t>(1e15);
  if (q < -1e15f) return -static_cast<int64_t>(1e15);
  // Round half to even as nearbyint does in the default rounding mode, without its libm call
  // (two per parameter on the encoder's hot path): for |q| < 2^22, q + 1.5 * 2^23 lies in
  // [2^23, 2^24), where the float spacing is 1, so the addition itself rounds.
  constexpr float kRoundMagic = 12582912.0f;
  if (std::fabs(q) < 4194304.0f) return static_cast<int64_t>((q + kRoundMagic) - kRoundMagic);
  return static_cast<int64_t>(std::nearbyint(q));
}

// Index of a zero value exactly on the grid, or false.
bool exact_zero_index(float zero, float step, int64_t& k) {
  if (!std::isfinite(zero) || !(step > 0) || !std::isfinite(step)) return false;
  const double q = static_cast<double>(zero) / static_cast<double>(step);
  if (!(std::fabs(q) < static_cast<double>(kMaxZeroIndex))) return false;
  // Round half to even, as predict_index: |q| < 2^40 puts q + 1.5 * 2^52 where the double
  // spacing is 1.
  constexpr double kRoundMagic = 6755399441055744.0;
  k = static_cast<int64_t>((q + kRoundMagic) - kRoundMagic);
  return float_bits(static_cast<float>(k) * step) == float_bits(zero);
}

uint32_t scale_index(float scale, const CompactGrid& g) {
  return float_bits(scale) >> (23 - g.scale_mantissa_bits);
}

// The order that codes the residuals in the fewest bits among the orders whose every code the
// reader accepts (prefix <= kMaxEgPrefix). A residual can be near 2^51 (a saturated prediction
// next to an extreme zero), whose cheapest order may have a longer prefix; order 24 always
// fits (zigzag values < 2^64, so (v >> 24) + 1 <= 2^40).
//
// Every order's exact total comes from two small histograms instead of a walk over the
// residuals per order. With b the bit length of a zigzag value v and k < b, (v >> k) + 1 has
// b - k bits, or b - k + 1 when the top b - k bits of v are all ones (the +1 carries out);
// for k >= b it is 1. So v costs k + 1 + 2 * max(0, b - k - 1), plus 2 when k lies in
// [b - r, b - 1] where r is the run of ones at the top of v.
struct EgOrder {
  int k = 24;
  uint64_t bits = UINT64_MAX;  // of every residual at order k
};
EgOrder best_eg_order(const std::vector<int64_t>& residuals) {
  uint64_t largest = 0;
  uint64_t by_length[65] = {};   // values per bit length b
  int64_t carry_delta[66] = {};  // difference array over k of the values whose code carries
  for (int64_t r : residuals) {
    const uint64_t v = BitWriter::zigzag(r);
    largest = std::max(largest, v);
    if (v == 0) {
      ++by_length[0];
      continue;
    }
    const int b = 64 - __builtin_clzll(v);
    const uint64_t top = ~(v << (64 - b));  // leading ones of v become leading zeros
    const int ones = top == 0 ? 64 : __builtin_clzll(top);
    ++by_length[b];
    ++carry_delta[b - ones];
    --carry_delta[b];
  }
  const uint64_t n = residuals.size();
  // Past the largest value's bit length every residual costs k + 1 bits, which only grows
  // with k: the search can stop there and still find the same (first) minimum.
  const int max_length = 64 - __builtin_clzll(largest | 1);  // no value is longer
  const int last_k = std::min(24, max_length + 1);
  EgOrder best;
  int64_t carrying = 0;
  for (int k = 0; k <= last_k; ++k) {
    carrying += carry_delta[k];
    if ((largest >> k) + 1 >= (uint64_t{1} << (kMaxEgPrefix + 1))) continue;
    uint64_t bits = n * static_cast<uint64_t>(k + 1) + 2 * static_cast<uint64_t>(carrying);
    for (int b = k + 2; b <= max_length; ++b)
      bits += 2 * by_length[b] * static_cast<uint64_t>(b - k - 1);
    if (bits < best.bits) best.bits = bits, best.k = k;
  }
  return best;
}

// Rounds v up to a float with `mbits` fractional significand bits (v > 0, finite).
float round_up_mantissa(float v, int mbits) {
  const uint32_t drop = 23 - mbits;
  uint32_t u = float_bits(v);
  const uint32_t low = u & ((1u << drop) - 1);
  u -= low;
  if (low != 0) u += 1u << drop;
  return bits_float(u);
}

}  // namespace

float scale_from_index(uint32_t index, const CompactGrid& g) {
  const uint32_t exponent = index >> g.scale_mantissa_bits;
  if (exponent == 0 || exponent >= 255) return 0.0f;
  return bits_float(index << (23 - g.scale_mantissa_bits));
}

float zero_step(float scale, const CompactGrid& g) {
  return scale * (1.0f / static_cast<float>(1 << g.zero_step_log2));
}

bool params_fit_compact(std::span<const float> scale, std::span<const float> zero,
                        const CompactGrid& g) {
  for (size_t i = 0; i < scale.size(); ++i) {
    const uint32_t idx = scale_index(scale[i], g);
    if (scale_from_index(idx, g) != scale[i] ||
        float_bits(scale_from_index(idx, g)) != float_bits(scale[i]))
      return false;
    int64_t k;
    if (!exact_zero_index(zero[i], zero_step(scale[i], g), k)) return false;
  }
  return true;
}

bool params_fit_fp16(std::span<const float> scale, std::span<const float> zero) {
  for (size_t i = 0; i < scale.size(); ++i) {
    if (!(scale[i] > 0) || !std::isfinite(scale[i]) || !std::isfinite(zero[i])) return false;
    if (float_bits(half_to_float(float_to_half(scale[i]))) != float_bits(scale[i])) return false;
    if (float_bits(half_to_float(float_to_half(zero[i]))) != float_bits(zero[i])) return false;
  }
  return true;
}

bool round_params_compact(std::span<const float> mins, std::span<const float> maxs, int bits,
                          const CompactGrid& g, std::vector<float>& scale,
                          std::vector<float>& zero) {
  const float levels = static_cast<float>((1 << bits) - 1);
  // Room for the zero to move down by up to one zero step.
  const float usable = levels - 1.0f / static_cast<float>(1 << g.zero_step_log2);
  scale.resize(mins.size());
  zero.resize(mins.size());
  for (size_t i = 0; i < mins.size(); ++i) {
    float need = (maxs[i] - mins[i]) / usable;
    if (!(need >= 1e-8f)) need = 1e-8f;
    float s = round_up_mantissa(need, g.scale_mantissa_bits);
    for (int attempt = 0;; ++attempt) {
      if (!std::isfinite(s) || attempt > 4) return false;
      const float step = zero_step(s, g);
      const float q = std::floor(mins[i] / step);
      if (!(std::fabs(q) < static_cast<float>(kMaxZeroIndex))) return false;
      int64_t k = static_cast<int64_t>(q);
      while (static_cast<float>(k) * step > mins[i]) --k;
      if (k <= -kMaxZeroIndex || k >= kMaxZeroIndex) return false;  // the reader's bound
      const float z = static_cast<float>(k) * step;
      if (!std::isfinite(z)) return false;
      if (z + s * levels >= maxs[i]) {
        scale[i] = s;
        zero[i] = z;
        break;
      }
      s = bits_float(float_bits(s) + (1u << (23 - g.scale_mantissa_bits)));
    }
  }
  return true;
}

bool round_params_fp16(std::span<const float> mins, std::span<const float> maxs, int bits,
                       std::vector<float>& scale, std::vector<float>& zero) {
  const float levels = static_cast<float>((1 << bits) - 1);
  scale.resize(mins.size());
  zero.resize(mins.size());
  for (size_t i = 0; i < mins.size(); ++i) {
    Half z = float_to_half(mins[i]);
    float zf = half_to_float(z);
    if (!std::isfinite(zf)) return false;
    if (zf > mins[i]) {  // step one fp16 value down
      z.bits = static_cast<uint16_t>((z.bits & 0x8000) ? z.bits + 1
                                                       : (z.bits == 0 ? 0x8001 : z.bits - 1));
      zf = half_to_float(z);
      if (!std::isfinite(zf)) return false;
    }
    float need = (maxs[i] - zf) / levels;
    if (!(need >= 1e-8f)) need = 1e-8f;
    Half s = float_to_half(need);
    for (int attempt = 0; half_to_float(s) < need || zf + half_to_float(s) * levels < maxs[i];
         ++attempt) {
      if (attempt > 4) return false;
      s.bits = static_cast<uint16_t>(s.bits + 1);
    }
    if (!std::isfinite(half_to_float(s))) return false;
    scale[i] = half_to_float(s);
    zero[i] = zf;
  }
  return true;
}

namespace {

// Prediction residuals of the scale and zero indices, in coding order (channel by channel).
void compact_residuals(std::span<const float> scale, std::span<const float> zero, size_t n_groups,
                       size_t dim, const CompactGrid& g, std::vector<int64_t>& scale_res,
                       std::vector<int64_t>& zero_res) {
  scale_res.reserve(scale.size());
  zero_res.reserve(zero.size());
  for (size_t c = 0; c < dim; ++c) {
    for (size_t gi = 0; gi < n_groups; ++gi) {
      const size_t i = gi * dim + c;
      // Predict from the previous group of the channel; the first group from channel c-1.
      const size_t prev = gi > 0 ? i - dim : (c > 0 ? c - 1 : SIZE_MAX);
      const int64_t s = scale_index(scale[i], g);
      scale_res.push_back(
          s - (prev == SIZE_MAX ? 0 : static_cast<int64_t>(scale_index(scale[prev], g))));
      const float step = zero_step(scale[i], g);
      int64_t k = 0;
      exact_zero_index(zero[i], step, k);
      zero_res.push_back(k - (prev == SIZE_MAX ? 0 : predict_index(zero[prev], step)));
    }
  }
}

}  // namespace

void write_params_compact(BitWriter& w, std::span<const float> scale, std::span<const float> zero,
                          size_t n_groups, size_t dim, const CompactGrid& g) {
  std::vector<int64_t> scale_res, zero_res;
  compact_residuals(scale, zero, n_groups, dim, g, scale_res, zero_res);
  const int ks = best_eg_order(scale_res).k, kz = best_eg_order(zero_res).k;
  w.put(static_cast<uint64_t>(ks), 5);
  w.put(static_cast<uint64_t>(kz), 5);
  for (size_t i = 0; i < scale_res.size(); ++i) {
    w.signed_exp_golomb(scale_res[i], ks);
    w.signed_exp_golomb(zero_res[i], kz);
  }
}

size_t params_compact_bits(std::span<const float> scale, std::span<const float> zero,
                           size_t n_groups, size_t dim, const CompactGrid& g) {
  std::vector<int64_t> scale_res, zero_res;
  compact_residuals(scale, zero, n_groups, dim, g, scale_res, zero_res);
  return 10 + best_eg_order(scale_res).bits + best_eg_order(zero_res).bits;
}

void read_params_compact(BitReader& r, size_t n_groups, size_t dim, const CompactGrid& g,
                         std::vector<float>& scale, std::vector<float>& zero) {
  const int ks = static_cast<int>(r.get(5, "scale Exp-Golomb order"));
  const int kz = static_cast<int>(r.get(5, "zero Exp-Golomb order"));
  if (ks > kMaxEgOrder || kz > kMaxEgOrder)
    fail(ErrorCode::corrupt_input, "codec stream: bad order");
  scale.assign(n_groups * dim, 0.0f);
  zero.assign(n_groups * dim, 0.0f);
  for (size_t c = 0; c < dim; ++c) {
    for (size_t gi = 0; gi < n_groups; ++gi) {
      const size_t i = gi * dim + c;
      const size_t prev = gi > 0 ? i - dim : (c > 0 ? c - 1 : SIZE_MAX);
      const int64_t ds = r.signed_exp_golomb(ks, "scale residual");
      const int64_t dz = r.signed_exp_golomb(kz, "zero residual");
      const int64_t sp = prev == SIZE_MAX ? 0 : scale_index(scale[prev], g);
      int64_t s = 0;  // a residual near 2^63 overflows the sum: out of range either way
      if (__builtin_add_overflow(sp, ds, &s)) s = 0;
      const float sf =
          (s > 0 && s < (int64_t{1} << 32)) ? scale_from_index(static_cast<uint32_t>(s), g) : 0.0f;
      if (!(sf > 0)) {
        fail(ErrorCode::corrupt_input, "codec stream: compact scale index " + std::to_string(s) +
                                           " of group " + std::to_string(gi) + ", channel " +
                                           std::to_string(c) + " is not a positive normal float");
      }
      const float step = zero_step(sf, g);
      int64_t k = 0;
      if (__builtin_add_overflow(prev == SIZE_MAX ? 0 : predict_index(zero[prev], step), dz, &k) ||
          k <= -kMaxZeroIndex || k >= kMaxZeroIndex) {
        fail(ErrorCode::corrupt_input, "codec stream: compact zero index of group " +
                                           std::to_string(gi) + ", channel " + std::to_string(c) +
                                           " exceeds 2^40");
      }
      scale[i] = sf;
      zero[i] = static_cast<float>(k) * step;
    }
  }
  check_decoded_params(scale, zero);
}

void check_decoded_params(std::span<const float> scale, std::span<const float> zero) {
  // One pass without branches (comparisons, false on NaN, OR-ed into a word: it vectorises),
  // then the first bad parameter's index only when there is one.
  const auto good = [&](size_t i) {
    return (scale[i] > 0) & (scale[i] <= FLT_MAX) & (std::fabs(zero[i]) <= FLT_MAX);
  };
  uint32_t bad = 0;
  for (size_t i = 0; i < scale.size(); ++i) bad |= static_cast<uint32_t>(!good(i));
  if (bad == 0) return;
  for (size_t i = 0; i < scale.size(); ++i) {
    if (!good(i)) {
      fail(ErrorCode::corrupt_input,
           "codec stream: parameter " + std::to_string(i) + " is not finite or has scale <= 0");
    }
  }
}

}  // namespace cachegen::detail
