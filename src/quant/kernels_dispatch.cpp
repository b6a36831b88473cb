#include "quant/kernels.h"

namespace cachegen::detail {

const QuantKernels& quant_kernels() {
  switch (simd_path()) {
    case SimdPath::avx512:
      return quant_kernels_avx512();
    case SimdPath::avx2:
      return quant_kernels_avx2();
    case SimdPath::scalar:
      break;
  }
  return quant_kernels_scalar();
}

}  // namespace cachegen::detail
