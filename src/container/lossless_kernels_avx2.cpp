// The lossless kernels compiled for AVX2 (see CMakeLists.txt for the flags).
#define CACHEGEN_KERNEL_NS avx2
#include "container/lossless_kernels_impl.h"

namespace cachegen::detail {

const LosslessKernels& lossless_kernels_avx2() {
  return avx2::kLosslessTable;
}

}  // namespace cachegen::detail
