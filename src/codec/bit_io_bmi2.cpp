// The Exp-Golomb run readers compiled with -mlzcnt -mbmi -mbmi2 (see CMakeLists.txt); chosen
// by BitReader on the AVX2 and AVX-512 paths, whose CPUs have them (cachegen::simd_path()).
#include "codec/bit_io.h"
#define CACHEGEN_BIT_RUNS_NS bmi2
#include "codec/bit_io_runs.h"

namespace cachegen::detail {
const BitRunKernels& bit_run_kernels_bmi2() noexcept {
  return bmi2::kBitRuns;
}
}  // namespace cachegen::detail
