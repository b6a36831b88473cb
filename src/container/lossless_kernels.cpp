// The lossless kernels for the baseline target, and the table for the running CPU.
#define CACHEGEN_KERNEL_NS scalar
#include "container/lossless_kernels_impl.h"

#include "cachegen/runtime.h"

namespace cachegen::detail {

const LosslessKernels& lossless_kernels_scalar() {
  return scalar::kLosslessTable;
}

const LosslessKernels& lossless_kernels() {
  switch (simd_path()) {
    case SimdPath::avx512:
      return lossless_kernels_avx512();
    case SimdPath::avx2:
      return lossless_kernels_avx2();
    case SimdPath::scalar:
      break;
  }
  return lossless_kernels_scalar();
}

}  // namespace cachegen::detail
