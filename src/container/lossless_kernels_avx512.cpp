// The lossless kernels compiled for AVX512 (see CMakeLists.txt for the flags).
#define CACHEGEN_KERNEL_NS avx512
#include "container/lossless_kernels_impl.h"

namespace cachegen::detail {

const LosslessKernels& lossless_kernels_avx512() {
  return avx512::kLosslessTable;
}

}  // namespace cachegen::detail
