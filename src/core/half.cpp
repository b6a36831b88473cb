#include "cachegen/half.h"

namespace cachegen {

float half_to_float(Half h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);  // Inf / NaN (payload kept)
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    u = sign;
  } else {  // subnormal: normalise
    int shift = 0;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      ++shift;
    }
    mant &= 0x3ffu;
    u = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

Half float_to_half(float f) noexcept {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN (NaN stays quiet NaN)
    return Half{static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u))};
  }
  if (abs >= 0x477ff000u) return Half{static_cast<uint16_t>(sign | 0x7c00u)};  // rounds to Inf
  if (abs < 0x38800000u) {                     // result is subnormal or zero
    if (abs < 0x33000000u) return Half{sign};  // below half the smallest subnormal: 0
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 + (112 - exp) + 1 ... total bits dropped
    const uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t h = r;
    if (rem > halfway || (rem == halfway && (r & 1u))) ++h;
    return Half{static_cast<uint16_t>(sign | h)};
  }
  // Normal: rebias exponent, round mantissa to 10 bits (nearest-even); a carry out of the
  // mantissa correctly bumps the exponent.
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return Half{static_cast<uint16_t>(sign | h)};
}

}  // namespace cachegen
