// Batched functions equal the loop over heads, whatever the thread count.
#include <gtest/gtest.h>

#include <cstring>

#include "cachegen/error.h"
#include "cachegen/quant.h"
#include "cachegen/runtime.h"
#include "quant/test_inputs.h"

namespace cachegen {
namespace {

TEST(Batch, EqualsLoopedSingleHead) {
  const size_t G = 7, n = 100, dim = 16;
  const std::vector<float> x = test::random_walk(G * n, dim, 0.1f, 1);
  for (size_t threads : {1, 2, 3, 8}) {
    set_thread_count(threads);
    const std::vector<CodeStream> b = quantize_to_codes_batch(x, G, n, dim, 3, 32);
    ASSERT_EQ(b.size(), G);
    size_t est = 0, fixed = 0;
    std::vector<Half> looped;
    for (size_t h = 0; h < G; ++h) {
      const CodeStream s =
          quantize_to_codes(std::span<const float>(x).subspan(h * n * dim, n * dim), n, dim, 3, 32);
      EXPECT_EQ(b[h].codes, s.codes);
      EXPECT_EQ(b[h].scale, s.scale);
      EXPECT_EQ(b[h].zero, s.zero);
      est += entropy_coded_bytes(s);
      fixed += fixed_width_bytes(s);
      const std::vector<Half> y = dequant_codes(s);
      looped.insert(looped.end(), y.begin(), y.end());
    }
    EXPECT_EQ(entropy_coded_bytes_batch(b), est);
    EXPECT_EQ(fixed_width_bytes_batch(b), fixed);
    const std::vector<Half> batched = dequant_codes_batch(b);
    ASSERT_EQ(batched.size(), looped.size());
    EXPECT_EQ(0, std::memcmp(batched.data(), looped.data(), looped.size() * 2));
    const std::vector<Half> qd = cachegen_quant_dequant_batch(x, G, n, dim, 3, 32);
    EXPECT_EQ(0, std::memcmp(qd.data(), looped.data(), looped.size() * 2));
  }
  set_thread_count(0);
}

TEST(Batch, Fp16BatchEqualsLoop) {
  const size_t G = 3, n = 33, dim = 8;
  const std::vector<float> x = test::random_walk(G * n, dim, 0.5f, 2);
  std::vector<Half> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = float_to_half(x[i]);
  const std::vector<CodeStream> b = quantize_to_codes_batch(h, G, n, dim, 5, 16);
  for (size_t g = 0; g < G; ++g) {
    EXPECT_EQ(b[g].codes, quantize_to_codes(std::span<const Half>(h).subspan(g * n * dim, n * dim),
                                            n, dim, 5, 16)
                              .codes);
  }
}

TEST(Batch, ErrorInOneHeadPropagates) {
  std::vector<float> x = test::random_walk(4 * 40, 8, 0.1f, 3);
  x[2 * 40 * 8 + 5] = std::numeric_limits<float>::quiet_NaN();
  set_thread_count(2);
  EXPECT_THROW(quantize_to_codes_batch(x, 4, 40, 8, 4), Error);
  set_thread_count(0);
}

TEST(Batch, MismatchedStreamsRejected) {
  std::vector<CodeStream> s = {quantize_to_codes(std::vector<float>(32 * 4, 1.f), 32, 4, 4),
                               quantize_to_codes(std::vector<float>(16 * 4, 1.f), 16, 4, 4)};
  EXPECT_THROW(dequant_codes_batch(s), Error);
}

}  // namespace
}  // namespace cachegen
