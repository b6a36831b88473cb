// Decoding hostile bytes: every truncation, single-byte corruptions, empty and oversized
// inputs end in a cachegen::Error or a valid stream, never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

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
  for (const bool one_model : {false, true}) {  // layouts 1 and 2
    EncodeOptions options;
    options.allow_one_model = one_model;
    const auto bytes = encode_values_batch(x, 5, 256, 8, 3, 32, options);
    ASSERT_EQ(bytes.at(6), one_model ? 2 : 1);
    for (size_t len = 0; len < bytes.size(); ++len) {
      EXPECT_THROW(decode_batch(std::span<const uint8_t>(bytes.data(), len)), Error) << len;
    }
    for (size_t i = 0; i < bytes.size(); ++i) {
      for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x5a}, uint8_t{0xff}}) {
        std::vector<uint8_t> bad = bytes;
        bad[i] ^= flip;
        expect_error_or_valid([](auto b) { return decode_batch(b); }, bad);
        expect_error_or_valid([](auto b) { return decode_batch_to_half(b); }, bad);
        expect_error_or_valid(
            [](auto b) {
              std::vector<Half> out(5 * 256 * 8);
              decode_batch_to_rows(b, {5, 256, 8, 3, 32}, out);
              return out;
            },
            bad);
      }
    }
    // Unknown layouts, zero heads_per_slice and oversized shapes are named errors.
    for (const uint8_t layout : {uint8_t{3}, uint8_t{7}}) {
      auto bad_layout = bytes;
      bad_layout[6] = layout;
      try {
        decode_batch(bad_layout);
        ADD_FAILURE() << "layout " << int{layout} << " accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::corrupt_input) << e.what();
      }
    }
    DecodeOptions small;
    small.max_elements = 100;
    try {
      decode_batch(bytes, small);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    }
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

// Found by the fuzz campaign: a compact-parameter residual near 2^63 overflowed the predicted
// index (signed overflow, UB; UBSan stops the sanitizer suite on it). It is corrupt input.
TEST(CodecHostile, HugeCompactResidualIsCorruptInput) {
  const std::vector<uint8_t> bytes = {
      0x43, 0x47, 0x43, 0x42, 0x01, 0x02, 0x01, 0x60, 0x08, 0x20, 0x02, 0x02, 0x06, 0x04, 0x26,
      0x10, 0xc0, 0x07, 0xec, 0x9f, 0x84, 0xa4, 0x38, 0x98, 0x70, 0x95, 0x9a, 0xfc, 0xa1, 0x23,
      0xb5, 0x29, 0xc2, 0x22, 0x5a, 0x5c, 0x98, 0x11, 0x92, 0xb2, 0x22, 0x89, 0x88, 0x6b, 0x4b,
      0x04, 0xc4, 0x31, 0x28, 0xc0, 0x88, 0xc6, 0x00, 0x02, 0x06, 0x04, 0x43, 0x47, 0x43, 0x42,
      0x01, 0x08, 0x01, 0x60, 0x08, 0x20, 0x02, 0x02, 0x06, 0x04, 0x32, 0x31, 0x40, 0x7e, 0xe9,
      0xfa, 0x99, 0x8d, 0x86, 0xa1, 0x16, 0x05, 0x00, 0x00, 0x06, 0xff, 0x04, 0x32, 0x31, 0x86,
      0xa1, 0x16, 0x05, 0x73, 0x31, 0x2b, 0x2b, 0x47, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00,
      0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x02, 0xce, 0xdb, 0x7e, 0x04, 0x02, 0x06, 0x4d,
      0x23, 0xdd, 0xd3, 0xdd, 0xdd, 0xd3, 0xdd, 0xdd, 0x02, 0x04, 0x8a, 0x02, 0x5a, 0xf3, 0x49,
      0x01, 0x5a, 0x5b, 0x1e, 0x07, 0x79, 0xec, 0x07, 0x00, 0x5a, 0x8b, 0x33, 0x00, 0x7a, 0x4a,
      0x17, 0x75, 0x46, 0xe2, 0xe1, 0xd9, 0xa9, 0x57, 0x48, 0xf9, 0xa6, 0x0d, 0xab, 0xab, 0xd6,
      0x6b, 0xf6, 0x98, 0xec, 0x26, 0xc0, 0x01, 0xd7, 0x1b, 0x71, 0x0f, 0x46, 0x2f, 0xe3, 0x6a,
      0x8e, 0x0e, 0x69, 0x01, 0x30, 0x68, 0x54, 0x41, 0xd6, 0x5e, 0x41, 0xda, 0xde, 0xf5, 0x1a,
      0xcb, 0x80, 0xe1, 0x95, 0xc9, 0x58, 0xf7, 0x39, 0x3f, 0x14, 0xcd, 0x56, 0xae, 0xe3, 0x7a,
      0x00, 0xbe, 0x66, 0x67, 0xfd, 0xbd, 0x4a, 0xd3, 0xe9, 0x95, 0xc4, 0xc8, 0x83, 0x49, 0xe5,
      0xea, 0xd9, 0x7d, 0x47, 0xa8, 0x89, 0xc6, 0x9d, 0xad, 0xfb, 0xc2, 0x5f, 0xfc, 0x74, 0xa0,
      0x32, 0x37, 0x9e, 0x1f, 0x5c, 0x04, 0x04, 0xaa, 0xfd, 0xf1, 0x96, 0x4b, 0x4d, 0x20, 0x0e,
      0xd3, 0x8e, 0x61, 0x07, 0xab, 0x4e, 0x8e, 0x61, 0x24, 0x3e, 0xe7, 0xdb, 0xa5, 0xef, 0x26,
      0x31, 0xe6, 0x78, 0x0f, 0x03, 0x0a, 0x03, 0xe1, 0xaf, 0x0f, 0x18, 0x98, 0x77, 0xf2, 0x95,
      0xd1, 0x80, 0xd2, 0x45, 0xca, 0x1c, 0x56, 0xe1, 0xfc, 0x0e, 0xc4, 0x01, 0x7e, 0x48, 0x8b,
      0x0f, 0xa5, 0xb3, 0xd4, 0xcc, 0x6e, 0x10, 0x86, 0xee, 0x12, 0x65, 0x5b, 0x3c, 0xb0, 0x08,
      0xa4, 0x16, 0xf9, 0x25, 0x81, 0xff, 0x6b, 0x84, 0x73, 0x80, 0x56, 0x7c, 0x0f, 0x58, 0x69,
      0x9c, 0x99, 0xfb, 0xeb, 0xff, 0x07, 0x0c, 0xc1, 0x87, 0xb1, 0x46, 0x0d, 0xb6, 0x02, 0x4c,
      0xc3, 0xff, 0x2b, 0xff, 0xf0, 0xaf, 0xe5, 0x3d, 0x32, 0x97, 0x6c, 0x4d, 0x89, 0x93, 0x30,
      0x0e, 0xd4, 0x2a, 0x35, 0x10, 0xb8, 0xe0, 0x82, 0x5a, 0x55, 0xff, 0x19, 0xfe, 0xc6, 0x66,
      0xf2, 0x51, 0xe3, 0x0c, 0xf7, 0xd0, 0x56, 0x7b, 0x07, 0x26, 0x49, 0x81, 0xb4, 0x76, 0x5a,
      0x7c, 0x73, 0xe2, 0x3a, 0xe8, 0x4c, 0x97, 0x88,
  };
  for (SimdPath p : {SimdPath::scalar, best_supported_simd_path()}) {
    set_simd_path(p);
    for (int fp16 = 0; fp16 < 2; ++fp16) {
      try {
        if (fp16)
          (void)decode_batch_to_half(bytes);
        else
          (void)decode_batch(bytes);
        ADD_FAILURE() << "accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::corrupt_input) << e.what();
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

// A stream whose fp32 parameters decode to a scale <= 0, an infinite or NaN scale or zero is
// corrupt_input naming the parameter, wherever it sits (first, middle or last of its block).
TEST(CodecHostile, NonFiniteOrNonPositiveParametersAreCorruptInput) {
  const auto x = test::random_walk(100, 8, 0.1f, 11);
  const CodeStream s = quantize_to_codes(x, 100, 8, 4, 32);
  const std::vector<uint8_t> good = encode(s);  // fp32 params: random scales fit nothing less
  const auto find = [&](float v) {
    uint8_t b[4];
    std::memcpy(b, &v, 4);  // the test host is little-endian, as the format
    const auto it = std::search(good.begin(), good.end(), b, b + 4);
    EXPECT_NE(it, good.end());
    return static_cast<size_t>(it - good.begin());
  };
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float bad_values[] = {0.0f, -1.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN()};
  for (const bool zero : {false, true}) {
    const std::vector<float>& params = zero ? s.zero : s.scale;
    for (const size_t i : {size_t{0}, params.size() / 2, params.size() - 1}) {
      const size_t at = find(params[i]);
      for (const float v : bad_values) {
        if (zero && (v == 0.0f || v == -1.0f)) continue;  // fine zeros
        std::vector<uint8_t> bad = good;
        std::memcpy(bad.data() + at, &v, 4);
        try {
          (void)decode(bad);
          ADD_FAILURE() << (zero ? "zero " : "scale ") << i << " = " << v << " accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::corrupt_input) << e.what();
          EXPECT_NE(std::string(e.what()).find("parameter"), std::string::npos) << e.what();
        }
      }
    }
  }
  EXPECT_NO_THROW((void)decode(good));
}

// A shared batch's fixed-width (fp32) parameters are read on the pool's threads: damaged ones
// in two heads report the first of them, as a sequential read would, on any thread count, and
// the undamaged batch decodes alike on all of them.
TEST(CodecHostile, SharedBatchFixedParametersFailAtTheFirstBadHead) {
  constexpr size_t kHeads = 12, kRows = 256, kDim = 32;  // enough parameters for threads
  const auto x = test::random_walk(kHeads * kRows, kDim, 0.1f, 12);
  const std::vector<CodeStream> streams = quantize_to_codes_batch(x, kHeads, kRows, kDim, 3, 32);
  const std::vector<uint8_t> good =
      encode_batch(streams);  // fp32 parameters: they fit nothing less
  ASSERT_NE(good.at(6), 0);   // a shared layout (1 or 2)
  const auto at_param = [&](size_t h, size_t i) {
    float v = streams[h].scale[i];
    uint8_t b[4];
    std::memcpy(b, &v, 4);  // the test host is little-endian, as the format
    const auto it = std::search(good.begin(), good.end(), b, b + 4);
    EXPECT_NE(it, good.end());
    return static_cast<size_t>(it - good.begin());
  };
  std::vector<uint8_t> bad = good;
  const float nan = std::numeric_limits<float>::quiet_NaN(), negative = -1.0f;
  std::memcpy(bad.data() + at_param(9, 7), &nan, 4);
  std::memcpy(bad.data() + at_param(5, 3), &negative, 4);
  std::vector<Half> want;
  for (const size_t threads : {1, 2, 3}) {
    set_thread_count(threads);
    try {
      (void)decode_batch_to_half(bad);
      ADD_FAILURE() << threads << " threads: accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::corrupt_input);
      EXPECT_EQ(e.message().rfind("codec batch, head 5: codec stream: parameter 3 ", 0), 0u)
          << e.what();
    }
    const std::vector<Half> got = decode_batch_to_half(good);
    if (want.empty()) want = got;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(Half)), 0) << threads;
  }
  set_thread_count(0);
}

}  // namespace
}  // namespace cachegen
