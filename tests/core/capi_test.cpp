// The C API: status codes, last-error messages, NULL handling.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cachegen/cachegen_c.h"
#include "cachegen/quant.h"

TEST(CApi, QuantizeDequantMatchesCpp) {
  std::vector<float> x(40 * 8);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 17.0f;
  cachegen_code_stream* s = nullptr;
  ASSERT_EQ(cachegen_quantize_f32(x.data(), 40, 8, 4, 16, &s), CACHEGEN_OK);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(cachegen_code_stream_n_rows(s), 40u);
  EXPECT_EQ(cachegen_code_stream_dim(s), 8u);
  EXPECT_EQ(cachegen_code_stream_bits(s), 4);
  const cachegen::CodeStream ref = cachegen::quantize_to_codes(x, 40, 8, 4, 16);
  std::vector<uint8_t> codes(40 * 8);
  ASSERT_EQ(cachegen_code_stream_codes(s, codes.data(), codes.size()), CACHEGEN_OK);
  EXPECT_TRUE(std::equal(codes.begin(), codes.end(), ref.codes.begin()));
  std::vector<uint16_t> y(40 * 8);
  ASSERT_EQ(cachegen_dequant(s, y.data(), y.size()), CACHEGEN_OK);
  const std::vector<cachegen::Half> ry = cachegen::dequant_codes(ref);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], ry[i].bits);
  size_t est = 0, fixed = 0;
  EXPECT_EQ(cachegen_entropy_coded_bytes(s, 1, 1, &est), CACHEGEN_OK);
  EXPECT_EQ(cachegen_fixed_width_bytes(s, &fixed), CACHEGEN_OK);
  EXPECT_EQ(est, cachegen::entropy_coded_bytes(ref));
  EXPECT_EQ(fixed, cachegen::fixed_width_bytes(ref));
  EXPECT_EQ(cachegen_dequant(s, y.data(), 3), CACHEGEN_OUTPUT_TOO_SMALL);
  cachegen_code_stream_free(s);
  cachegen_code_stream_free(nullptr);
}

TEST(CApi, ErrorsAreCodesWithMessages) {
  cachegen_code_stream* s = nullptr;
  std::vector<float> x(8, 1.0f);
  EXPECT_EQ(cachegen_quantize_f32(x.data(), 8, 1, 9, 32, &s), CACHEGEN_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(std::string(cachegen_last_error()).find("bits"), std::string::npos);
  EXPECT_EQ(cachegen_quantize_f32(nullptr, 8, 1, 4, 32, &s), CACHEGEN_INVALID_ARGUMENT);
  EXPECT_EQ(cachegen_quantize_f32(x.data(), 8, 1, 4, 32, nullptr), CACHEGEN_INVALID_ARGUMENT);
  EXPECT_STREQ(cachegen_status_name(CACHEGEN_CORRUPT_INPUT), "corrupt_input");
  EXPECT_STREQ(cachegen_status_name(1234), "unknown_status");
  int bits[5];
  EXPECT_EQ(cachegen_layer_group_bits(5, 4, 3, bits, 5), CACHEGEN_OK);
  EXPECT_EQ(bits[0], 4);
  EXPECT_EQ(bits[4], 2);
  EXPECT_EQ(cachegen_layer_group_bits(5, 4, 3, bits, 4), CACHEGEN_OUTPUT_TOO_SMALL);
  EXPECT_EQ(cachegen_layer_group_bits(5, 4, 0, bits, 5), CACHEGEN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cachegen_version()), "");
}
