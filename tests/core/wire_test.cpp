// The shared little-endian wire layer: fixed-width fields, strict varints, bounds and the
// errors that name context, field and absolute offset.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/wire.h"

namespace cachegen {
namespace {

using Bytes = std::vector<uint8_t>;

ErrorCode code_of(const std::function<void()>& f, std::string* msg = nullptr) {
  try {
    f();
    return ErrorCode::ok;
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.code();
  }
}

TEST(Wire, FixedWidthRoundTrip) {
  Bytes b;
  wire::Writer w(b);
  w.u8(0xab);
  w.u16(0x1234);
  w.u32(0xdeadbeef);
  w.u64(0x0102030405060708ull);
  w.i32(-7);
  w.f32(1.5f);
  w.zeros(3);
  EXPECT_EQ(b.size(), 1u + 2 + 4 + 8 + 4 + 4 + 3);
  EXPECT_EQ(b[1], 0x34);  // little-endian
  EXPECT_EQ(b[2], 0x12);
  wire::Reader r(b, "test");
  EXPECT_EQ(r.u8("a"), 0xab);
  EXPECT_EQ(r.u16("b"), 0x1234);
  EXPECT_EQ(r.u32("c"), 0xdeadbeefu);
  EXPECT_EQ(r.u64("d"), 0x0102030405060708ull);
  EXPECT_EQ(r.i32("e"), -7);
  EXPECT_EQ(r.f32("f"), 1.5f);
  r.expect_zero(3, "reserved");
  r.expect_end("the test fields");
}

TEST(Wire, WordArraysAreLittleEndian) {
  const uint16_t words[] = {0x1234, 0xabcd, 0x00ff};
  Bytes b(7, 0x55);
  wire::store_le16_array(b.data() + 1, words, 3);
  EXPECT_EQ(b, (Bytes{0x55, 0x34, 0x12, 0xcd, 0xab, 0xff, 0x00}));
  const Bytes le = {0x78, 0x56, 0x34, 0x12, 0x01, 0x00, 0x00, 0x80};
  uint32_t out[2] = {};
  wire::load_le32_array(le.data(), out, 2);
  EXPECT_EQ(out[0], 0x12345678u);
  EXPECT_EQ(out[1], 0x80000001u);
  Bytes back(10, 0x55);
  wire::store_le32_array(back.data() + 1, out, 2);
  EXPECT_EQ(back, (Bytes{0x55, 0x78, 0x56, 0x34, 0x12, 0x01, 0x00, 0x00, 0x80, 0x55}));
}

TEST(Wire, VarintsRoundTripAtEveryLength) {
  for (uint64_t v :
       {uint64_t{0}, uint64_t{1}, uint64_t{127}, uint64_t{128}, uint64_t{16383}, uint64_t{16384},
        uint64_t{1} << 35, uint64_t{1} << 63, std::numeric_limits<uint64_t>::max()}) {
    Bytes b;
    wire::Writer(b).varint(v);
    EXPECT_EQ(b.size(), wire::varint_size(v));
    wire::Reader r(b, "test");
    EXPECT_EQ(r.varint("v"), v);
    EXPECT_EQ(r.remaining(), 0u);
  }
}

TEST(Wire, VarintsMustBeMinimalAndShort) {
  const Bytes bad[] = {
      {0x80, 0x00},                                                        // 0 in two bytes
      {0xff, 0x00},                                                        // trailing zero group
      {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02},        // past 64 bits
      {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},  // 11 bytes
      {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00},        // 10th byte zero
  };
  for (const Bytes& b : bad) {
    std::string msg;
    EXPECT_EQ(code_of([&] { wire::Reader(b, "ctx", 100).varint("n_rows"); }, &msg),
              ErrorCode::corrupt_input);
    EXPECT_NE(msg.find("ctx: varint 'n_rows' at offset 100"), std::string::npos) << msg;
  }
  std::string msg;
  EXPECT_EQ(code_of(
                [&] {
                  wire::Reader(Bytes{0x80, 0x80}, "ctx").varint("len");
                },
                &msg),
            ErrorCode::truncated_input);
  EXPECT_NE(msg.find("'len' at offset 2"), std::string::npos) << msg;
}

TEST(Wire, BoundsAndErrorsNameContextFieldAndOffset) {
  const Bytes b = {1, 2, 3, 0, 5};
  std::string msg;
  EXPECT_EQ(code_of(
                [&] {
                  wire::Reader r(b, "cgkv header", 32);
                  r.take(2, "magic");
                  r.u32("n_layers");
                },
                &msg),
            ErrorCode::truncated_input);
  EXPECT_NE(msg.find("cgkv header: 'n_layers' at offset 34 needs 4 bytes, 3 left"),
            std::string::npos)
      << msg;
  EXPECT_EQ(code_of([&] { wire::Reader(b, "x").take(uint64_t{1} << 62, "huge"); }),
            ErrorCode::truncated_input);
  EXPECT_EQ(code_of(
                [&] {
                  wire::Reader r(b, "x", 10);
                  r.take(2, "a");
                  r.expect_zero(2, "reserved");
                },
                &msg),
            ErrorCode::corrupt_input);
  EXPECT_NE(msg.find("reserved 'reserved' at offset 12"), std::string::npos) << msg;
  EXPECT_EQ(code_of([&] { wire::Reader(b, "x").expect_end("nothing"); }, &msg),
            ErrorCode::corrupt_input);
  wire::Reader r(b, "x", 7);
  r.take(3, "head");
  EXPECT_EQ(r.offset(), 10u);
  EXPECT_EQ(r.position(), 3u);
  EXPECT_EQ(r.remaining(), 2u);
  EXPECT_EQ(r.rest().size(), 2u);
}

}  // namespace
}  // namespace cachegen
