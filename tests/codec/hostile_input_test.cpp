// Decoding hostile bytes: every truncation, single-byte corruptions, empty and oversized
// inputs end in a cachegen::Error or a valid stream, never a crash.
#include <gtest/gtest.h>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "cachegen/runtime.h"
#include "codec_test_inputs.h"

namespace cachegen {
namespace {

template <typename F>
void expect_error_or_valid(F&& decode_fn, std::span<const uint8_t> bytes) {
  try {
    decode_fn(bytes);
  } catch (const Error& e) {
    EXPECT_NE(e.code(), ErrorCode::ok);
  }
}

std::vector<std::vector<uint8_t>> sample_streams() {
  std::vector<std::vector<uint8_t>> out;
  const auto x = test::random_walk(100, 8, 0.1f, 11);
  out.push_back(encode_values(x, 100, 8, 3));
  out.push_back(encode(quantize_to_codes(x, 100, 8, 4, 32)));  // fp32 params
  const auto big = test::random_walk(4096, 8, 0.1f, 12);
  out.push_back(encode_values(big, 4096, 8, 5));  // 32 lanes
  return out;
}

TEST(CodecHostile, EveryTruncationIsAnError) {
  for (const auto& bytes : sample_streams()) {
    for (size_t len = 0; len < bytes.size(); ++len) {
      const std::span<const uint8_t> cut(bytes.data(), len);
      EXPECT_THROW(decode(cut), Error) << "length " << len;
    }
  }
}

TEST(CodecHostile, SingleByteCorruptionsNeverCrash) {
  for (const auto& bytes : sample_streams()) {
    const size_t step = bytes.size() > 2000 ? 7 : 1;
    for (size_t i = 0; i < bytes.size(); i += step) {
      for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
        std::vector<uint8_t> bad = bytes;
        bad[i] ^= flip;
        expect_error_or_valid([](auto b) { return decode(b); }, bad);
      }
    }
  }
}

TEST(CodecHostile, ErrorCodesNameTheProblem) {
  const auto bytes = sample_streams()[0];
  try {
    decode(std::span<const uint8_t>());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::truncated_input);
  }
  auto bad_magic = bytes;
  bad_magic[0] = 'X';
  try {
    decode(bad_magic);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_input);
  }
  auto bad_version = bytes;
  bad_version[4] = 99;
  try {
    decode(bad_version);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported_version);
  }
  auto trailing = bytes;
  trailing.push_back(0);
  EXPECT_THROW(decode(trailing), Error);
}

TEST(CodecHostile, OversizedShapesAreRejectedBeforeAllocation) {
  // magic, version, n_rows = 2^40 (varint), dim = 2^20, group 32, bits 3, fp32, p 3, 32 lanes.
  std::vector<uint8_t> b = {'C',  'G',  'C',  'S',  1,  0x80, 0x80, 0x80, 0x80, 0x80,
                            0x20, 0x80, 0x80, 0x40, 32, 3,    0,    3,    32};
  try {
    decode(b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  }
  const auto x = test::random_walk(64, 8, 0.1f, 1);
  DecodeOptions small;
  small.max_elements = 100;
  EXPECT_THROW(decode(encode_values(x, 64, 8, 3), small), Error);
  // Maximal sane input still decodes.
  DecodeOptions exact;
  exact.max_elements = 64 * 8;
  EXPECT_NO_THROW(decode(encode_values(x, 64, 8, 3), exact));
}

TEST(CodecHostile, BatchTruncationsAndCorruptions) {
  const auto x = test::random_walk(3 * 64, 8, 0.1f, 5);
  const auto bytes = encode_values_batch(x, 3, 64, 8, 3);
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_THROW(decode_batch(std::span<const uint8_t>(bytes.data(), len)), Error) << len;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> bad = bytes;
    bad[i] ^= 0x5a;
    expect_error_or_valid([](auto b) { return decode_batch(b); }, bad);
    expect_error_or_valid([](auto b) { return decode_batch_to_half(b); }, bad);
  }
}

TEST(CodecHostile, SharedBatchTruncationsAndCorruptions) {
  const auto x = test::random_walk(5 * 256, 8, 0.1f, 6);
  const auto bytes = encode_values_batch(x, 5, 256, 8, 3);
  ASSERT_EQ(bytes.at(6), 1);  // the shared-model layout
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_THROW(decode_batch(std::span<const uint8_t>(bytes.data(), len)), Error) << len;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x5a}, uint8_t{0xff}}) {
      std::vector<uint8_t> bad = bytes;
      bad[i] ^= flip;
      expect_error_or_valid([](auto b) { return decode_batch(b); }, bad);
      expect_error_or_valid([](auto b) { return decode_batch_to_half(b); }, bad);
    }
  }
  // Unknown layout, zero heads_per_slice and oversized shapes are named errors.
  auto bad_layout = bytes;
  bad_layout[6] = 7;
  EXPECT_THROW(decode_batch(bad_layout), Error);
  DecodeOptions small;
  small.max_elements = 100;
  try {
    decode_batch(bytes, small);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  }
}

// Found by the fuzz campaign: a batch whose head has 0 channels decoded to fp16 divided by
// dim (SIGFPE). An empty stream is legal and decodes to no values, on every path.
TEST(CodecHostile, ZeroChannelBatchDecodesToNothing) {
  const std::vector<uint8_t> bytes = {0x43, 0x47, 0x43, 0x42, 0x01, 0x01, 0x00, 0x0c, 0x00, 0x00,
                                      0x04, 0x03, 0x02, 0x15, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00};
  for (SimdPath p : {SimdPath::scalar, best_supported_simd_path()}) {
    set_simd_path(p);
    try {
      EXPECT_TRUE(decode_batch_to_half(bytes).empty());
      for (const CodeStream& s : decode_batch(bytes)) EXPECT_EQ(s.n_rows * s.dim, 0u);
    } catch (const Error& e) {
      ADD_FAILURE() << "a legal empty batch was refused: " << e.what();
    }
  }
  set_simd_path(best_supported_simd_path());
}

}  // namespace
}  // namespace cachegen
