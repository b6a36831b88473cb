// Internal: transparent huge pages for large buffers. Where the kernel leaves them to
// madvise (Debian's default), every 4 KiB page of a fresh buffer faults on first touch and
// costs a TLB entry; asking for 2 MiB pages before the large buffers are touched took a
// lossless encode of a 128 MiB array from 3.6 to 1.7 s and its decode from 1.8 to 0.9 s on the
// project's 2-core VM (docs/PERFORMANCE.md, "At scale").
#pragma once

#include <cstddef>
#include <vector>

namespace cachegen::detail {

// Asks for huge pages on the whole 2 MiB pages inside [p, p + n); a hint (nothing happens
// where the kernel or the range does not allow it).
void advise_huge_pages(void* p, size_t n) noexcept;

// v resized to n elements, its storage advised for huge pages before the resize touches it
// (when the resize allocates).
template <typename T>
void resize_huge(std::vector<T>& v, size_t n) {
  if (n > v.capacity()) {
    v.reserve(n);
    advise_huge_pages(v.data(), n * sizeof(T));
  }
  v.resize(n);
}

}  // namespace cachegen::detail
