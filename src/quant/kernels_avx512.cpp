// The quantization kernels compiled for AVX-512 (F/BW/VL) + F16C.
#if defined(__AVX512F__) && defined(__F16C__)
#define CACHEGEN_HAVE_F16C 1
#define CACHEGEN_KERNEL_NS avx512
#include "quant/kernels_impl.h"
namespace cachegen::detail {
const QuantKernels& quant_kernels_avx512() {
  return avx512::kTable;
}
}  // namespace cachegen::detail
#else
#include "quant/kernels.h"
namespace cachegen::detail {
const QuantKernels& quant_kernels_avx512() {
  return quant_kernels_avx2();
}
}  // namespace cachegen::detail
#endif
