// Internal: fresh large buffers made ready before their first touch. Where the kernel leaves
// transparent huge pages to madvise (Debian's default), every 4 KiB page of a fresh buffer
// faults on first touch and costs a TLB entry; asking for 2 MiB pages before the large buffers
// are touched took a lossless encode of a 128 MiB array from 3.6 to 1.7 s and its decode from
// 1.8 to 0.9 s on the project's 2-core VM (docs/PERFORMANCE.md, "At scale"). Pages not made
// huge still fault one by one (~1.7 us a page on that VM, a tenth of a lossless encode of
// tinystories-hd64's KV): buffers about to be written have theirs mapped in one call instead,
// at about half the cost.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "cachegen/half.h"

namespace cachegen::detail {

// Asks for huge pages on the whole 2 MiB pages inside [p, p + n). A hint: nothing happens
// where the kernel does not allow it.
void advise_huge_pages(void* p, size_t n) noexcept;
// Maps the whole pages inside [p, p + n) writable in one call when the range is 64 KiB or more
// (MADV_POPULATE_WRITE, Linux 5.14+): the faults its first writes would take, at about half
// their cost. Pages already mapped are left as they are; the bytes never change; nothing
// happens where the kernel lacks it.
void populate_pages(void* p, size_t n) noexcept;

// v's capacity made at least n elements; new storage is advised for huge pages and populated
// before anything touches it (for buffers about to be written whole).
template <typename T>
void reserve_huge(std::vector<T>& v, size_t n) {
  if (n > v.capacity()) {
    v.reserve(n);
    advise_huge_pages(v.data(), n * sizeof(T));
    populate_pages(v.data(), n * sizeof(T));
  }
}

// v resized to n elements, its new storage prepared before the resize touches it.
template <typename T>
void resize_huge(std::vector<T>& v, size_t n) {
  reserve_huge(v, n);
  v.resize(n);
}

// n elements in storage prepared as reserve_huge prepares it, left uninitialised: for buffers
// that a read or a decoder writes whole (a vector's resize would fill them first).
template <typename T>
std::unique_ptr<T[]> make_huge_for_overwrite(size_t n) {
  std::unique_ptr<T[]> p = std::make_unique_for_overwrite<T[]>(n);
  advise_huge_pages(p.get(), n * sizeof(T));
  populate_pages(p.get(), n * sizeof(T));
  return p;
}

// n zero halves in prepared storage. std::vector<Half>(n) and resize fill through a reference
// into their own storage, which compilers cannot vectorise (a store might change the value):
// one 2-byte store at a time, ~10% of a decode to fp16 and a quarter of a lossless file's
// decode through read_tokens. Copying from an iterator of zeros is a plain vector fill.
std::vector<Half> zeroed_halves(size_t n);

}  // namespace cachegen::detail
