// The Exp-Golomb kernels compiled with -mlzcnt -mbmi -mbmi2 (see CMakeLists.txt); chosen on
// the AVX2 and AVX-512 paths, whose CPUs have them (cachegen::simd_path()).
#include "codec/bit_io.h"
#define CACHEGEN_EXP_GOLOMB_NS bmi2
#include "codec/bit_io_kernels.h"

namespace cachegen::detail {
const ExpGolombKernels& exp_golomb_kernels_bmi2() noexcept {
  return bmi2::kExpGolomb;
}
}  // namespace cachegen::detail
