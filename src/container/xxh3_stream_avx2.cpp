// The XXH3 stream kernels compiled for AVX2 (see CMakeLists.txt for the flags).
#define CACHEGEN_KERNEL_NS avx2
#include "container/xxh3_stream_impl.h"

namespace cachegen::detail {

const Xxh3Kernels& xxh3_kernels_avx2() {
  return avx2::kXxh3Table;
}

}  // namespace cachegen::detail
