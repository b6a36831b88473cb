#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace cachegen::detail {

void advise_huge_pages(void* p, size_t n) noexcept {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) & ~(kHuge - 1);
#ifdef MADV_HUGEPAGE
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
}

}  // namespace cachegen::detail
