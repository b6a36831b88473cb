#include "codec/params_codec.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>

#include "cachegen/half.h"
#include "cachegen/runtime.h"

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
int64_t predict_index_far(float q) {
  if (!(q == q)) return 0;
  if (q > 1e15f) return static_cast<int64_t>(1e15);
  if (q < -1e15f) return -static_cast<int64_t>(1e15);
  return static_cast<int64_t>(std::nearbyint(q));
}
inline int64_t predict_index(float value, float step) {
  const float q = value / step;
  // Round half to even as nearbyint does in the default rounding mode, without its libm call
  // (two per parameter on the encoder's hot path): for |q| < 2^22, q + 1.5 * 2^23 lies in
  // [2^23, 2^24), where the float spacing is 1, so the addition itself rounds. (NaN fails the
  // comparison.)
  constexpr float kRoundMagic = 12582912.0f;
  if (std::fabs(q) < 4194304.0f) [[likely]]
    return static_cast<int64_t>((q + kRoundMagic) - kRoundMagic);
  return predict_index_far(q);
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
ExpGolombOrder best_eg_order(const std::vector<int64_t>& residuals) {
  if (simd_path() == SimdPath::avx512) {
    if (const auto best = best_eg_order_avx512(residuals.data(), residuals.size(), kMaxEgPrefix))
      return *best;
  }
  return exp_golomb_kernels().best_order(residuals.data(), residuals.size(), kMaxEgPrefix);
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

bool round_param_compact(float mn, float mx, int bits, const CompactGrid& g, float& scale,
                         float& zero) {
  const float levels = static_cast<float>((1 << bits) - 1);
  // Room for the zero to move down by up to one zero step.
  const float usable = levels - zero_step_factor(g);
  float need = (mx - mn) / usable;
  if (!(need >= 1e-8f)) need = 1e-8f;
  float s = round_up_mantissa(need, g.scale_mantissa_bits);
  for (int attempt = 0;; ++attempt) {
    if (!std::isfinite(s) || attempt > 4) return false;
    const float step = zero_step(s, g);
    const float q = std::floor(mn / step);
    if (!(std::fabs(q) < static_cast<float>(kMaxZeroIndex))) return false;
    int64_t k = static_cast<int64_t>(q);
    while (static_cast<float>(k) * step > mn) --k;
    if (k <= -kMaxZeroIndex || k >= kMaxZeroIndex) return false;  // the reader's bound
    const float z = static_cast<float>(k) * step;
    if (!std::isfinite(z)) return false;
    if (z + s * levels >= mx) {
      scale = s;
      zero = z;
      return true;
    }
    s = bits_float(float_bits(s) + (1u << (23 - g.scale_mantissa_bits)));
  }
}

bool round_params_compact(std::span<const float> mins, std::span<const float> maxs, int bits,
                          const CompactGrid& g, std::vector<float>& scale,
                          std::vector<float>& zero) {
  scale.resize(mins.size());
  zero.resize(mins.size());
  if (simd_path() == SimdPath::avx512)
    return round_params_compact_avx512(mins.data(), maxs.data(), mins.size(), bits, g, scale.data(),
                                       zero.data());
  if (simd_path() == SimdPath::avx2)
    return round_params_compact_avx2(mins.data(), maxs.data(), mins.size(), bits, g, scale.data(),
                                     zero.data());
  for (size_t i = 0; i < mins.size(); ++i)
    if (!round_param_compact(mins[i], maxs[i], bits, g, scale[i], zero[i])) return false;
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

// Prediction residuals of the scale and zero indices, in coding order (channel by channel);
// false, at once, if some parameter is off the grid (params_fit_compact's test, in the same
// pass).
bool compact_residuals(std::span<const float> scale, std::span<const float> zero, size_t n_groups,
                       size_t dim, const CompactGrid& g, std::vector<int64_t>& scale_res,
                       std::vector<int64_t>& zero_res) {
  scale_res.resize(scale.size());
  zero_res.resize(zero.size());
  // Parameters off the grid (the reference quantizer's) show it in the first one: refused
  // before the vector pass, which makes every residual before it can tell (~2.4 us of the
  // 40 heads of stories260K's encode of reference-quantized codes, on one thread before the
  // batch's parallel loops).
  if (!scale.empty()) {
    int64_t k;
    if (float_bits(scale_from_index(scale_index(scale[0], g), g)) != float_bits(scale[0]) ||
        !exact_zero_index(zero[0], zero_step(scale[0], g), k))
      return false;
  }
  if (simd_path() == SimdPath::avx512 && n_groups * dim < (size_t{1} << 31) &&
      compact_residuals_avx512(scale.data(), zero.data(), n_groups, dim, g, scale_res.data(),
                               zero_res.data()))
    return true;
  bool exact = true;
  for (size_t c = 0, p = 0; c < dim; ++c) {
    for (size_t gi = 0; gi < n_groups; ++gi, ++p) {
      const size_t i = gi * dim + c;
      // Predict from the previous group of the channel; the first group from channel c-1.
      const size_t prev = gi > 0 ? i - dim : (c > 0 ? c - 1 : SIZE_MAX);
      const uint32_t s = scale_index(scale[i], g);
      exact &= float_bits(scale_from_index(s, g)) == float_bits(scale[i]);
      scale_res[p] = static_cast<int64_t>(s) -
                     (prev == SIZE_MAX ? 0 : static_cast<int64_t>(scale_index(scale[prev], g)));
      const float step = zero_step(scale[i], g);
      int64_t k = 0;
      exact &= exact_zero_index(zero[i], step, k);
      if (!exact) return false;
      zero_res[p] = k - (prev == SIZE_MAX ? 0 : predict_index(zero[prev], step));
    }
  }
  return true;
}

}  // namespace

bool plan_params_compact(std::span<const float> scale, std::span<const float> zero, size_t n_groups,
                         size_t dim, const CompactGrid& g, CompactCode& code) {
  if (!compact_residuals(scale, zero, n_groups, dim, g, code.scale_res, code.zero_res))
    return false;
  const ExpGolombOrder os = best_eg_order(code.scale_res), oz = best_eg_order(code.zero_res);
  code.ks = os.k;
  code.kz = oz.k;
  code.bits = 10 + os.bits + oz.bits;
  return true;
}

void write_params_compact(BitWriter& w, const CompactCode& code) {
  w.put(static_cast<uint64_t>(code.ks), 5);
  w.put(static_cast<uint64_t>(code.kz), 5);
  const int64_t* const a = code.scale_res.data();
  const int64_t* const b = code.zero_res.data();
  const size_t n = code.scale_res.size();
  if (simd_path() != SimdPath::avx512) {
    w.signed_exp_golomb_pairs(a, b, n, code.ks, code.kz);
    return;
  }
  // The pairs' codes made 8 at a time, then put in runs (a chain of shifts and stores, half
  // the writer's work per pair); a pair the bulk codes leave out (n_bits 0) code by code.
  thread_local std::vector<uint64_t> codes;
  thread_local std::vector<uint8_t> n_bits;
  codes.resize(n);
  n_bits.resize(n);
  exp_golomb_pair_codes_avx512(a, b, n, code.ks, code.kz, codes.data(), n_bits.data());
  for (size_t i = 0; i < n;) {
    const void* zero = std::memchr(n_bits.data() + i, 0, n - i);
    const size_t end =
        zero ? static_cast<size_t>(static_cast<const uint8_t*>(zero) - n_bits.data()) : n;
    w.put_codes(codes.data() + i, n_bits.data() + i, end - i);
    if (end == n) break;
    w.signed_exp_golomb(a[end], code.ks);
    w.signed_exp_golomb(b[end], code.kz);
    i = end + 1;
  }
}

void write_params_compact(BitWriter& w, std::span<const float> scale, std::span<const float> zero,
                          size_t n_groups, size_t dim, const CompactGrid& g) {
  CompactCode code;
  if (!plan_params_compact(scale, zero, n_groups, dim, g, code))
    fail(ErrorCode::invalid_argument, "codec: compact parameters off their grid");
  write_params_compact(w, code);
}

uint64_t residual_rows_part(const int64_t* res, size_t n_groups, size_t dim, size_t g0, size_t g1,
                            size_t c0, size_t c1, int32_t* ds, int32_t* dz) {
  uint64_t far = 0;
  for (size_t gi = g0; gi < g1; ++gi) {
    for (size_t c = c0; c < c1; ++c) {
      const size_t p = c * n_groups + gi;
      const int64_t a = res[2 * p], b = res[2 * p + 1];
      // Within +-2^30 exactly when adding 2^30 (mod 2^64) leaves a value below 2^31.
      far |= (static_cast<uint64_t>(a) + (uint64_t{1} << 30)) |
             (static_cast<uint64_t>(b) + (uint64_t{1} << 30));
      ds[gi * dim + c] = static_cast<int32_t>(a);
      dz[gi * dim + c] = static_cast<int32_t>(b);
    }
  }
  return far;
}

namespace {

// Parameter i from its residuals and the parameter it is predicted from (`prev`, none for the
// first one). False if the scale index (s) is not a positive normal float or the zero index
// reaches 2^40.
template <bool kHasPrev>
inline bool reconstruct(size_t i, size_t prev, int64_t ds, int64_t dz, const CompactGrid& g,
                        float* scale, float* zero, int64_t& s) {
  const int64_t sp = kHasPrev ? scale_index(scale[prev], g) : 0;
  // A residual near 2^63 overflows the sum: out of range either way.
  if (__builtin_add_overflow(sp, ds, &s)) s = 0;
  const float sf =
      (s > 0 && s < (int64_t{1} << 32)) ? scale_from_index(static_cast<uint32_t>(s), g) : 0.0f;
  const float step = zero_step(sf, g);
  int64_t k = 0;
  const bool zero_ok =
      !__builtin_add_overflow(kHasPrev ? predict_index(zero[prev], step) : 0, dz, &k) &&
      k > -kMaxZeroIndex && k < kMaxZeroIndex;
  scale[i] = sf;
  zero[i] = static_cast<float>(k) * step;
  return (sf > 0) & zero_ok;
}

// compact_later_groups_avx512 or _avx2 where one runs (the CPU has it, every residual within
// +-2^30, every parameter valid and near its prediction): false where it did not.
bool later_groups_simd(size_t n_groups, size_t dim, const int64_t* res, const CompactGrid& g,
                       float* scale, float* zero) {
  const SimdPath path = simd_path();
  if (path == SimdPath::scalar || n_groups < 2) return false;
  // The residuals group-major, as 32-bit integers: written in order, read across the channels'
  // runs (in L1; stored a channel at a time, tinystories-hd64's 3-bit file decode took 2% more).
  thread_local std::vector<int32_t> kept;
  std::vector<int32_t>& rows = kept;
  const size_t n = n_groups * dim;
  rows.resize(2 * n);
  int32_t* ds = rows.data();
  int32_t* dz = ds + n;
  if (path == SimdPath::avx512
          ? !residual_rows_avx512(res, n_groups, dim, ds, dz)
          : residual_rows_part(res, n_groups, dim, 0, n_groups, 0, dim, ds, dz) >> 31)
    return false;
  return path == SimdPath::avx512
             ? compact_later_groups_avx512(n_groups, dim, ds, dz, g, scale, zero)
             : compact_later_groups_avx2(n_groups, dim, ds, dz, g, scale, zero);
}

// The first `count` parameters in coding order (channel by channel), reporting the first that
// fails as corrupt_input: the reader's errors, in its order.
void reconstruct_in_order(size_t count, size_t n_groups, size_t dim, const int64_t* res,
                          const CompactGrid& g, float* scale, float* zero) {
  for (size_t p = 0; p < count; ++p) {
    const size_t c = p / n_groups, gi = p % n_groups, i = gi * dim + c;
    int64_t s = 0;
    const bool good = p == 0 ? reconstruct<false>(i, 0, res[0], res[1], g, scale, zero, s)
                             : reconstruct<true>(i, gi > 0 ? i - dim : c - 1, res[2 * p],
                                                 res[2 * p + 1], g, scale, zero, s);
    if (good) continue;
    const std::string where = " of group " + std::to_string(gi) + ", channel " + std::to_string(c);
    if (!(s > 0 && s < (int64_t{1} << 32) && scale_from_index(static_cast<uint32_t>(s), g) > 0)) {
      fail(ErrorCode::corrupt_input, "codec stream: compact scale index " + std::to_string(s) +
                                         where + " is not a positive normal float");
    }
    fail(ErrorCode::corrupt_input, "codec stream: compact zero index" + where + " exceeds 2^40");
  }
}

}  // namespace

namespace {

// read_params_compact in two steps, so that two sections' residuals can be read side by side
// in between: the orders (and the outputs sized), then the rest of the residuals and the
// parameters.
struct CompactRead {
  int k[2] = {0, 0};
  size_t n = 0;               // parameters
  std::vector<int64_t>* res;  // 2n residuals, `read` of them so far
  size_t read = 0;
};

void begin_compact(BitReader& r, size_t n_groups, size_t dim, std::vector<float>& scale,
                   std::vector<float>& zero, std::vector<int64_t>& res, CompactRead& c) {
  c.k[0] = static_cast<int>(r.get(5, "scale Exp-Golomb order"));
  c.k[1] = static_cast<int>(r.get(5, "zero Exp-Golomb order"));
  if (c.k[0] > kMaxEgOrder || c.k[1] > kMaxEgOrder)
    fail(ErrorCode::corrupt_input, "codec stream: bad order");
  c.n = n_groups * dim;
  scale.assign(c.n, 0.0f);
  zero.assign(c.n, 0.0f);
  res.resize(2 * c.n);
  c.res = &res;
  c.read = 0;
}

// The rest of c's residuals: the error of a damaged code is returned, not thrown, and reported
// by complete_compact once the parameters before it are checked (the first error in coding
// order is the one reported).
std::exception_ptr read_rest(BitReader& r, CompactRead& c) {
  const size_t n = c.n;
  std::vector<int64_t>& res = *c.res;
  try {
    while (c.read < 2 * n) {
      // The run's first code is residual `read`: its order is k[read & 1] (a run stopped by a
      // long code, or by the other section of a pair, can leave `read` odd).
      const int k[2] = {c.k[c.read & 1], c.k[(c.read + 1) & 1]};
      c.read += r.signed_exp_golomb_run(res.data() + c.read, 2 * n - c.read, k);
      if (c.read == 2 * n) break;
      res[c.read] =
          r.signed_exp_golomb(c.k[c.read & 1], c.read & 1 ? "zero residual" : "scale residual");
      ++c.read;
    }
  } catch (const Error&) {
    return std::current_exception();
  }
  return nullptr;
}

// Group 0 of channel ch of a section whose residuals are all read, from channel ch - 1's (one
// chain through the channels); false where a parameter is invalid.
bool first_group_step(size_t ch, size_t n_groups, const int64_t* res, const CompactGrid& g,
                      float* scale, float* zero) {
  const size_t p = ch * n_groups;
  int64_t s;
  return ch == 0 ? reconstruct<false>(0, 0, res[0], res[1], g, scale, zero, s)
                 : reconstruct<true>(ch, ch - 1, res[2 * p], res[2 * p + 1], g, scale, zero, s);
}

// The parameters of a section whose residuals were read (read_error: the reader's error, if
// any), first_good the result of its group-0 chain where already computed (nullptr: not yet),
// later_good that of the SIMD code's later groups where it ran (nullptr: not yet; false: the
// portable code computes them).
void complete_compact(size_t n_groups, size_t dim, const CompactGrid& g, std::vector<float>& scale,
                      std::vector<float>& zero, const CompactRead& c,
                      const std::exception_ptr& read_error, const bool* first_good,
                      const bool* later_good = nullptr) {
  // First every residual (scale and zero of each parameter in coding order), then the
  // parameters group by group: the channels' prediction chains run side by side, not one
  // after the other behind the bit reader.
  const size_t n = c.n;
  const int64_t* const res = c.res->data();
  if (read_error) {
    reconstruct_in_order(c.read / 2, n_groups, dim, res, g, scale.data(), zero.data());
    std::rethrow_exception(read_error);
  }
  // The first group's channels each from the one before (a chain), later groups' from the
  // group above.
  bool good = true;
  if (first_good) {
    good = *first_good;
  } else {
    for (size_t ch = 0; ch < dim && n > 0; ++ch)
      good &= first_group_step(ch, n_groups, res, g, scale.data(), zero.data());
  }
  if (later_good ? !*later_good
                 : !later_groups_simd(n_groups, dim, res, g, scale.data(), zero.data())) {
    int64_t s;
    for (size_t gi = 1; gi < n_groups; ++gi) {
      for (size_t ch = 0; ch < dim; ++ch) {
        const size_t i = gi * dim + ch, p = ch * n_groups + gi;
        good &= reconstruct<true>(i, i - dim, res[2 * p], res[2 * p + 1], g, scale.data(),
                                  zero.data(), s);
      }
    }
  }
  if (!good) reconstruct_in_order(n, n_groups, dim, res, g, scale.data(), zero.data());
  check_decoded_params(scale, zero);
}

}  // namespace

void read_params_compact(BitReader& r, size_t n_groups, size_t dim, const CompactGrid& g,
                         std::vector<float>& scale, std::vector<float>& zero) {
  thread_local std::vector<int64_t> kept;
  CompactRead c;
  begin_compact(r, n_groups, dim, scale, zero, kept, c);
  const std::exception_ptr read_error = read_rest(r, c);
  complete_compact(n_groups, dim, g, scale, zero, c, read_error, nullptr);
}

void read_params_compact_pair(BitReader& ra, size_t n_groups_a, size_t dim_a, const CompactGrid& ga,
                              std::vector<float>& scale_a, std::vector<float>& zero_a,
                              BitReader& rb, size_t n_groups_b, size_t dim_b, const CompactGrid& gb,
                              std::vector<float>& scale_b, std::vector<float>& zero_b,
                              const char* section, int& failing) {
  failing = 0;
  thread_local std::vector<int64_t> kept[2];
  CompactRead a, b;
  begin_compact(ra, n_groups_a, dim_a, scale_a, zero_a, kept[0], a);
  std::exception_ptr b_error;  // reported after everything of a
  try {
    begin_compact(rb, n_groups_b, dim_b, scale_b, zero_b, kept[1], b);
    BitReader::signed_exp_golomb_runs(ra, a.res->data(), 2 * a.n, a.k, a.read, rb, b.res->data(),
                                      2 * b.n, b.k, b.read);
  } catch (const Error&) {
    b_error = std::current_exception();
  }
  // Both sections' remaining residuals (b's errors kept until a is done), then, where both
  // read whole, their group-0 chains side by side: each runs one channel after another (a
  // division and roundings a step), and one section after the other they were about half of
  // the parameters' reconstruction (tinystories-hd64's 3-bit file decode -2.7% side by side).
  const std::exception_ptr a_error = read_rest(ra, a);
  std::exception_ptr b_read_error;
  if (!b_error) b_read_error = read_rest(rb, b);
  bool first_good[2] = {true, true};
  const bool together = !a_error && !b_error && !b_read_error && a.n > 0 && b.n > 0;
  if (together) {
    const int64_t* const res_a = a.res->data();
    const int64_t* const res_b = b.res->data();
    for (size_t ch = 0; ch < std::max(dim_a, dim_b); ++ch) {
      if (ch < dim_a)
        first_good[0] &= first_group_step(ch, n_groups_a, res_a, ga, scale_a.data(), zero_a.data());
      if (ch < dim_b)
        first_good[1] &= first_group_step(ch, n_groups_b, res_b, gb, scale_b.data(), zero_b.data());
    }
  }
  complete_compact(n_groups_a, dim_a, ga, scale_a, zero_a, a, a_error,
                   together ? &first_good[0] : nullptr);
  ra.finish(section);
  failing = 1;
  if (b_error) std::rethrow_exception(b_error);
  complete_compact(n_groups_b, dim_b, gb, scale_b, zero_b, b, b_read_error,
                   together ? &first_good[1] : nullptr);
  rb.finish(section);
}

bool read_params_compact_lanes(std::span<BitReader* const> r, size_t n_groups, size_t dim,
                               std::span<const CompactGrid* const> grid,
                               std::span<std::vector<float>* const> scale,
                               std::span<std::vector<float>* const> zero, const char* section) {
  const size_t m = r.size();
  if (m == 0 || m > kMaxLaneReaders || !BitReader::lanes_available()) return false;
  thread_local std::vector<int64_t> kept[kMaxLaneReaders];
  CompactRead c[kMaxLaneReaders];
  int k[kMaxLaneReaders][2];
  int64_t* out[kMaxLaneReaders];
  for (size_t j = 0; j < m; ++j) {
    begin_compact(*r[j], n_groups, dim, *scale[j], *zero[j], kept[j], c[j]);
    k[j][0] = c[j].k[0];
    k[j][1] = c[j].k[1];
    out[j] = kept[j].data();
  }
  // Four codes of every reader a step; where the kernel stops (a long code, a reader near its
  // input's end), the next four of each one at a time, then the kernel again.
  const size_t total = 2 * c[0].n;
  size_t read = 0;
  while (read < total) {
    read += BitReader::signed_exp_golomb_lanes(r, out, read, total, k);
    const size_t stop = std::min(total, read + 4);
    for (size_t j = 0; j < m; ++j) {
      for (size_t i = read; i < stop; ++i)
        out[j][i] =
            r[j]->signed_exp_golomb(k[j][i & 1], i & 1 ? "zero residual" : "scale residual");
    }
    read = stop;
  }
  // The group-0 chains side by side (each a channel after another: read_params_compact_pair),
  // a section a lane on AVX-512 (as scalar steps, section after section, ~10 sections' chains
  // were bound by their instructions: ~6% of stories260K's 64-token file decode), then the rest
  // of each section.
  bool first_good[kMaxLaneReaders];
  std::fill_n(first_good, m, true);
  float* first_scale[kMaxLaneReaders];
  float* first_zero[kMaxLaneReaders];
  for (size_t j = 0; j < m; ++j) first_scale[j] = scale[j]->data(), first_zero[j] = zero[j]->data();
  for (size_t j0 = 0; j0 < m && total > 0; j0 += 16) {
    const size_t k = std::min<size_t>(16, m - j0);
    if (simd_path() == SimdPath::avx512 &&
        compact_first_groups_many_avx512(k, n_groups, dim, out + j0, grid.data() + j0,
                                         first_scale + j0, first_zero + j0, first_good + j0))
      continue;
    for (size_t ch = 0; ch < dim; ++ch) {
      for (size_t j = j0; j < j0 + k; ++j)
        first_good[j] &=
            first_group_step(ch, n_groups, out[j], *grid[j], scale[j]->data(), zero[j]->data());
    }
  }
  // Rows of at most 16 channels: the sections' later-group chains side by side too (one
  // section's is a division and its roundings a group, latency bound).
  bool later_good[kMaxLaneReaders];
  const bool side_by_side = simd_path() == SimdPath::avx512 && dim <= 16 && n_groups >= 2;
  if (side_by_side) {
    thread_local std::vector<int32_t> kept_rows;
    const size_t n = n_groups * dim;
    kept_rows.resize(2 * n * m);
    const int32_t *ds[kMaxLaneReaders], *dz[kMaxLaneReaders];
    const CompactGrid* g[kMaxLaneReaders];
    float *sc[kMaxLaneReaders], *ze[kMaxLaneReaders];
    size_t which[kMaxLaneReaders], count = 0;
    for (size_t j = 0; j < m; ++j) {
      int32_t* const rows = kept_rows.data() + 2 * n * j;
      later_good[j] = false;
      if (!residual_rows_avx512(out[j], n_groups, dim, rows, rows + n)) continue;
      ds[count] = rows, dz[count] = rows + n, g[count] = grid[j];
      sc[count] = scale[j]->data(), ze[count] = zero[j]->data(), which[count++] = j;
    }
    bool good[kMaxLaneReaders];
    compact_later_groups_many_avx512(count, n_groups, dim, ds, dz, g, sc, ze, good);
    for (size_t i = 0; i < count; ++i) later_good[which[i]] = good[i];
  }
  for (size_t j = 0; j < m; ++j) {
    c[j].read = total;
    complete_compact(n_groups, dim, *grid[j], *scale[j], *zero[j], c[j], nullptr, &first_good[j],
                     side_by_side ? &later_good[j] : nullptr);
    r[j]->finish(section);
  }
  return true;
}

void check_decoded_params(std::span<const float> scale, std::span<const float> zero) {
  // One pass without branches (comparisons, false on NaN, OR-ed into a word: it vectorises),
  // then the first bad parameter's index only when there is one.
  const auto good = [&](size_t i) {
    return static_cast<uint32_t>(scale[i] > 0) & static_cast<uint32_t>(scale[i] <= FLT_MAX) &
           static_cast<uint32_t>(std::fabs(zero[i]) <= FLT_MAX);
  };
  uint32_t bad = 0;
  for (size_t i = 0; i < scale.size(); ++i) bad |= good(i) ^ 1u;
  if (bad == 0) return;
  for (size_t i = 0; i < scale.size(); ++i) {
    if (!good(i)) {
      fail(ErrorCode::corrupt_input,
           "codec stream: parameter " + std::to_string(i) + " is not finite or has scale <= 0");
    }
  }
}

}  // namespace cachegen::detail
