// The quantization kernels compiled for AVX2 + F16C (see CMakeLists.txt for the flags).
#if defined(__AVX2__) && defined(__F16C__)
#define CACHEGEN_HAVE_F16C 1
#define CACHEGEN_KERNEL_NS avx2
#include "quant/kernels_impl.h"
namespace cachegen::detail {
const QuantKernels& quant_kernels_avx2() {
  return avx2::kTable;
}
}  // namespace cachegen::detail
#else
#include "quant/kernels.h"
namespace cachegen::detail {
const QuantKernels& quant_kernels_avx2() {
  return quant_kernels_scalar();
}
}  // namespace cachegen::detail
#endif
