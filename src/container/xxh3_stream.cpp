// The XXH3 stream kernels for the baseline target, and the table for the running CPU.
#define CACHEGEN_KERNEL_NS scalar
#include "container/xxh3_stream_impl.h"

#include "cachegen/runtime.h"

namespace cachegen::detail {

const Xxh3Kernels& xxh3_kernels_scalar() {
  return scalar::kXxh3Table;
}

const Xxh3Kernels& xxh3_kernels() {
  return simd_path() == SimdPath::scalar ? xxh3_kernels_scalar() : xxh3_kernels_avx2();
}

}  // namespace cachegen::detail
