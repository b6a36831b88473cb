#include "core/huge_pages.h"

#include <sys/mman.h>

#include <compare>
#include <cstdint>
#include <iterator>

namespace cachegen::detail {
namespace {

// A random-access iterator over `count` zero halves.
struct ZeroHalfIterator {
  using iterator_category = std::random_access_iterator_tag;
  using value_type = Half;
  using difference_type = std::ptrdiff_t;
  using pointer = const Half*;
  using reference = Half;
  size_t i = 0;
  Half operator*() const noexcept { return Half{0}; }
  Half operator[](difference_type) const noexcept { return Half{0}; }
  ZeroHalfIterator& operator++() noexcept { return ++i, *this; }
  ZeroHalfIterator operator++(int) noexcept { return ZeroHalfIterator{i++}; }
  ZeroHalfIterator& operator--() noexcept { return --i, *this; }
  ZeroHalfIterator operator--(int) noexcept { return ZeroHalfIterator{i--}; }
  ZeroHalfIterator& operator+=(difference_type d) noexcept {
    i += static_cast<size_t>(d);
    return *this;
  }
  ZeroHalfIterator& operator-=(difference_type d) noexcept {
    i -= static_cast<size_t>(d);
    return *this;
  }
  [[maybe_unused]] friend ZeroHalfIterator operator+(ZeroHalfIterator a,
                                                     difference_type d) noexcept {
    return a += d;
  }
  [[maybe_unused]] friend ZeroHalfIterator operator-(ZeroHalfIterator a,
                                                     difference_type d) noexcept {
    return a -= d;
  }
  friend difference_type operator-(ZeroHalfIterator a, ZeroHalfIterator b) noexcept {
    return static_cast<difference_type>(a.i - b.i);
  }
  friend bool operator==(ZeroHalfIterator a, ZeroHalfIterator b) noexcept { return a.i == b.i; }
  [[maybe_unused]] friend auto operator<=>(ZeroHalfIterator a, ZeroHalfIterator b) noexcept {
    return a.i <=> b.i;
  }
};

// f(begin, bytes) on the whole units (a power of two) inside [p, p + n), if any.
template <typename F>
void on_whole_units(void* p, size_t n, uintptr_t unit, F&& f) {
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + unit - 1) & ~(unit - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) & ~(unit - 1);
  if (end > begin) f(reinterpret_cast<void*>(begin), end - begin);
}

}  // namespace

void advise_huge_pages(void* p, size_t n) noexcept {
#ifdef MADV_HUGEPAGE
  on_whole_units(p, n, uintptr_t{2} << 20,
                 [](void* at, size_t bytes) { ::madvise(at, bytes, MADV_HUGEPAGE); });
#endif
}

void populate_pages(void* p, size_t n) noexcept {
#ifdef MADV_POPULATE_WRITE
  if (n >= (size_t{64} << 10)) {
    on_whole_units(p, n, 4096,
                   [](void* at, size_t bytes) { ::madvise(at, bytes, MADV_POPULATE_WRITE); });
  }
#endif
}

std::vector<Half> zeroed_halves(size_t n) {
  std::vector<Half> v;
  reserve_huge(v, n);
  v.assign(ZeroHalfIterator{0}, ZeroHalfIterator{n});
  return v;
}

}  // namespace cachegen::detail
