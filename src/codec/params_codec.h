// Internal: storage of group parameters (scale, zero), [n_groups, dim] each.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "cachegen/codec.h"
#include "codec/bit_io.h"

namespace cachegen::detail {

struct CompactGrid {
  int scale_mantissa_bits = 6;  // 1..23
  int zero_step_log2 = 4;       // 0..8
};

// Compact grid values. scale_from_index fails (returns 0) for indices that are not a positive
// normal float; zero_from_index multiplies in fp32 (deterministic, IEEE).
inline float scale_from_index(uint32_t index, const CompactGrid& g) {
  const uint32_t exponent = index >> g.scale_mantissa_bits;
  if (exponent == 0 || exponent >= 255) return 0.0f;
  return std::bit_cast<float>(index << (23 - g.scale_mantissa_bits));
}
// 2^-zero_step_log2 (0..8: a normal float, the exponent field written directly): the quotient
// 1.0f / (1 << zero_step_log2) without a division (the scalar group-0 chains paid one a step,
// off their critical path: no change measured).
inline float zero_step_factor(const CompactGrid& g) {
  return std::bit_cast<float>(static_cast<uint32_t>(127 - g.zero_step_log2) << 23);
}
inline float zero_step(float scale, const CompactGrid& g) {
  return scale * zero_step_factor(g);
}

// True when every parameter lies exactly on the grid (so compact storage is lossless).
bool params_fit_compact(std::span<const float> scale, std::span<const float> zero,
                        const CompactGrid& g);
// True when every parameter is exactly an fp16 value (scale also > 0).
bool params_fit_fp16(std::span<const float> scale, std::span<const float> zero);

// Rounds min/max of every group-channel to grid parameters that cover [min, max]:
// zero <= min, zero + scale * (2^bits - 1) >= max. Returns false if the grid cannot represent
// them (overflow, non-finite).
bool round_params_compact(std::span<const float> mins, std::span<const float> maxs, int bits,
                          const CompactGrid& g, std::vector<float>& scale,
                          std::vector<float>& zero);
bool round_params_fp16(std::span<const float> mins, std::span<const float> maxs, int bits,
                       std::vector<float>& scale, std::vector<float>& zero);
// quantize_values_into of fp16 rows, returning the parameters' precision: compact unless the
// grid cannot hold some group's (then fp16, or the reference's fp32, for every group). Row r
// starts at x[r * stride] (stride >= dim: a head's rows inside token-major rows of every head,
// quantized where they lie), and x ends with the last row.
ParamPrecision quantize_values_reporting(std::span<const Half> x, size_t stride, size_t n_rows,
                                         size_t dim, int bits, size_t group_size,
                                         const EncodeOptions& options, CodeStream& out);
// One group-channel of round_params_compact.
bool round_param_compact(float mn, float mx, int bits, const CompactGrid& g, float& scale,
                         float& zero);
// The AVX-512 twin of round_params_compact's loop over n group-channels (the same values;
// parameters off its fast path through round_param_compact).
bool round_params_compact_avx512(const float* mins, const float* maxs, size_t n, int bits,
                                 const CompactGrid& g, float* scale, float* zero);
// The same, 8 at a time (AVX2).
bool round_params_compact_avx2(const float* mins, const float* maxs, size_t n, int bits,
                               const CompactGrid& g, float* scale, float* zero);

// Compact parameters as coded: prediction residuals in coding order (channel by channel), the
// Exp-Golomb orders that code them in the fewest bits, and those bits (orders included).
struct CompactCode {
  std::vector<int64_t> scale_res, zero_res;
  int ks = 0, kz = 0;
  size_t bits = 0;
};
// Plans the code of [n_groups, dim] parameters; false if some parameter is off the grid
// (params_fit_compact), when the code would not decode to them.
bool plan_params_compact(std::span<const float> scale, std::span<const float> zero, size_t n_groups,
                         size_t dim, const CompactGrid& g, CompactCode& code);
void write_params_compact(BitWriter& w, const CompactCode& code);

// Compact parameters, [n_groups, dim] row-major, coded channel by channel: parameters on the
// grid (params_fit_compact; Error(invalid_argument) otherwise).
void write_params_compact(BitWriter& w, std::span<const float> scale, std::span<const float> zero,
                          size_t n_groups, size_t dim, const CompactGrid& g);
void read_params_compact(BitReader& r, size_t n_groups, size_t dim, const CompactGrid& g,
                         std::vector<float>& scale, std::vector<float>& zero);
// Two whole sections of parameters, as read_params_compact then finish(section) on ra, then
// the same on rb, give them (the values, or the first error: a's before anything of b's, with
// `failing` 0 for a's, 1 for b's), their residuals read side by side.
void read_params_compact_pair(BitReader& ra, size_t n_groups_a, size_t dim_a, const CompactGrid& ga,
                              std::vector<float>& scale_a, std::vector<float>& zero_a,
                              BitReader& rb, size_t n_groups_b, size_t dim_b, const CompactGrid& gb,
                              std::vector<float>& scale_b, std::vector<float>& zero_b,
                              const char* section, int& failing);
// read_params_compact then finish(section) on readers r[0..m) (m <= kMaxLaneReaders) of
// sections of one shape, their codes read side by side by BitReader::signed_exp_golomb_lanes:
// false, reading nothing, where that does not run. Throws the first error it meets, which need
// not be the first in the sections' order: a caller reports errors by reading the sections
// again one by one (or in pairs).
bool read_params_compact_lanes(std::span<BitReader* const> r, size_t n_groups, size_t dim,
                               std::span<const CompactGrid* const> grid,
                               std::span<std::vector<float>* const> scale,
                               std::span<std::vector<float>* const> zero, const char* section);

// The residuals of read_params_compact (pairs: scale then zero residual of each parameter in
// coding order, channel by channel) of groups [g0, g1) and channels [c0, c1), laid out
// [n_groups, dim] as 32-bit integers for compact_later_groups_*; returns the OR of every
// residual + 2^30 (mod 2^64): some residual is beyond +-2^30 where that is 2^31 or more.
uint64_t residual_rows_part(const int64_t* res, size_t n_groups, size_t dim, size_t g0, size_t g1,
                            size_t c0, size_t c1, int32_t* ds, int32_t* dz);
// All of them, blocks of 8 groups x 16 channels transposed on AVX-512: false where some
// residual is beyond +-2^30 (ds and dz then hold nothing usable).
bool residual_rows_avx512(const int64_t* res, size_t n_groups, size_t dim, int32_t* ds,
                          int32_t* dz);
// The AVX-512 part of read_params_compact: groups 1.. of every channel from the group above
// (group 0 already in scale/zero), from residuals laid out [n_groups, dim] as 32-bit integers
// (each within +-2^30). False if some parameter is invalid or its prediction's quotient (the
// previous zero over the new step) is 2^22 or more in magnitude: the portable code then
// computes them all.
bool compact_later_groups_avx512(size_t n_groups, size_t dim, const int32_t* ds, const int32_t* dz,
                                 const CompactGrid& g, float* scale, float* zero);
// compact_later_groups_avx512 of m sections of one shape, at most 16 channels (a vector a
// group), their chains side by side: good[j] as section j's result.
void compact_later_groups_many_avx512(size_t m, size_t n_groups, size_t dim,
                                      const int32_t* const* ds, const int32_t* const* dz,
                                      const CompactGrid* const* g, float* const* scale,
                                      float* const* zero, bool* good);
// Group 0 of m <= 16 sections of one shape (dim <= 64 channels), their chains through the
// channels side by side, a section a lane: read_params_compact's first group from residuals
// in coding order (res[j]: section j's), each section's grid its own. False (nothing written)
// where some residual of group 0 is beyond +-2^30; else good[j] false where section j has a
// parameter that is invalid or whose prediction's quotient reaches 2^22 (the portable code
// then computes that section: its values here are not the reader's).
bool compact_first_groups_many_avx512(size_t m, size_t n_groups, size_t dim,
                                      const int64_t* const* res, const CompactGrid* const* g,
                                      float* const* scale, float* const* zero, bool* good);
// The same, 8 channels at a time (AVX2).
bool compact_later_groups_avx2(size_t n_groups, size_t dim, const int32_t* ds, const int32_t* dz,
                               const CompactGrid& g, float* scale, float* zero);

// The AVX-512 twin of the encoder's residuals (plan_params_compact) for parameters on the grid
// whose quotients (zero over step, the predicted one too) stay below 2^22: every residual at
// once, or false (nothing decided: the portable loop then computes them, and whether the
// parameters are on the grid). n_groups * dim < 2^31.
bool compact_residuals_avx512(const float* scale, const float* zero, size_t n_groups, size_t dim,
                              const CompactGrid& g, int64_t* scale_res, int64_t* zero_res);

// The AVX-512 twin of best_eg_order (the same order and bits) where every zigzag residual is
// below 2^32 - 1 and count below 2^26; nullopt otherwise.
std::optional<ExpGolombOrder> best_eg_order_avx512(const int64_t* residuals, size_t count,
                                                   int max_prefix);

// BitWriter::signed_exp_golomb_pairs' codes in bulk: pair i's a-code (order ka) followed by
// its b-code (order kb) as code[i] of n_bits[i] bits, or n_bits[i] = 0 where they take more
// than 56 bits or a zigzag value reaches 2^32 - 1 (the pair is then put code by code).
void exp_golomb_pair_codes_avx512(const int64_t* a, const int64_t* b, size_t n, int ka, int kb,
                                  uint64_t* code, uint8_t* n_bits);

// Throws corrupt_input unless every scale is finite and > 0 and every zero finite.
void check_decoded_params(std::span<const float> scale, std::span<const float> zero);

}  // namespace cachegen::detail
