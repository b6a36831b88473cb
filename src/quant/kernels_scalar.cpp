// Scalar reference twin of the quantization kernels (baseline x86-64 / any CPU).
#define CACHEGEN_KERNEL_NS scalar
#include "quant/kernels_impl.h"

namespace cachegen::detail {
const QuantKernels& quant_kernels_scalar() {
  return scalar::kTable;
}
}  // namespace cachegen::detail
