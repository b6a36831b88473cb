// layer_group_bits: shallow layers keep more bits.
#include <string>

#include "cachegen/quant.h"
#include "core/checks.h"

namespace cachegen {
namespace {

// round_half_even(num / den) for num >= 0, den > 0, in exact integer arithmetic.
long long div_round_half_even(long long num, long long den) {
  const long long q = num / den, r = num % den;
  if (2 * r > den) return q + 1;
  if (2 * r == den) return q + (q & 1);
  return q;
}

}  // namespace

std::vector<int> layer_group_bits(int n_layers, int base_bits, int n_groups) {
  if (n_layers < 0) detail::invalid("n_layers must be >= 0, got " + std::to_string(n_layers));
  if (n_groups <= 0) detail::invalid("n_groups must be >= 1, got " + std::to_string(n_groups));
  detail::check_bits(base_bits, "base_bits");
  std::vector<int> bits(static_cast<size_t>(n_layers));
  // Never more groups than layers: otherwise a group would be empty and a lone shallow
  // layer would lose bits (the reference's schedule for 1 layer is [base_bits]).
  if (n_groups > n_layers) n_groups = n_layers;
  for (int g = 0; g < n_groups; ++g) {
    const long long lo = div_round_half_even(1LL * n_layers * g, n_groups);
    const long long hi = div_round_half_even(1LL * n_layers * (g + 1), n_groups);
    const int b = base_bits - g > 2 ? base_bits - g : 2;
    for (long long l = lo; l < hi; ++l) bits[static_cast<size_t>(l)] = b;
  }
  return bits;
}

}  // namespace cachegen
