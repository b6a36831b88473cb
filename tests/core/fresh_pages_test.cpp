// Fresh large buffers (core/huge_pages.h): the page hints never change a byte, and the helpers
// give the sizes and values they promise.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/huge_pages.h"

namespace cachegen::detail {
namespace {

// A pattern that zero pages would not reproduce.
uint8_t pattern(size_t i) {
  return static_cast<uint8_t>(i * 131 + 7);
}

TEST(FreshPages, HintsKeepEveryByte) {
  // Ranges with unaligned ends, below and above the 64 KiB and 2 MiB thresholds; the memory
  // is written first, so mapped pages with content are what the hints meet.
  for (const size_t n : {size_t{100}, size_t{70000}, size_t{3} << 20}) {
    std::vector<uint8_t> v(n + 3);
    for (size_t i = 0; i < v.size(); ++i) v[i] = pattern(i);
    advise_huge_pages(v.data() + 3, n);
    populate_pages(v.data() + 3, n);
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], pattern(i)) << "n " << n << " at " << i;
  }
}

TEST(FreshPages, ReserveAndResizeKeepContents) {
  std::vector<uint32_t> v = {1, 2, 3};
  reserve_huge(v, size_t{1} << 20);
  EXPECT_GE(v.capacity(), size_t{1} << 20);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[2], 3u);
  resize_huge(v, 70000);
  ASSERT_EQ(v.size(), 70000u);
  EXPECT_EQ(v[0], 1u);
  EXPECT_EQ(v[69999], 0u);
}

TEST(FreshPages, ZeroedHalvesAreZero) {
  for (const size_t n : {size_t{0}, size_t{1}, size_t{40000}, size_t{1} << 21}) {
    const std::vector<Half> v = zeroed_halves(n);
    ASSERT_EQ(v.size(), n);
    size_t nonzero = 0;
    for (const Half h : v) nonzero += h.bits != 0;
    EXPECT_EQ(nonzero, 0u) << "n " << n;
  }
}

}  // namespace
}  // namespace cachegen::detail
