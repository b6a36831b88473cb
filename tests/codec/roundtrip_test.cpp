// Lossless round trips over bit widths, edge sizes, degenerate channels and batches.
#include <gtest/gtest.h>

#include <bit>
#include <random>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "cachegen/runtime.h"
#include "codec/stream_format.h"
#include "codec_test_inputs.h"

namespace cachegen {
namespace {

using test::expect_same_stream;

class RoundTrip : public ::testing::TestWithParam<int> {};

TEST_P(RoundTrip, QuantizedStreamsEveryEdgeSize) {
  const int bits = GetParam();
  for (size_t n_rows : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{2048}}) {
    for (size_t dim : {size_t{1}, size_t{8}, size_t{128}}) {
      const auto x = test::random_walk(n_rows, dim, 0.12f, static_cast<uint32_t>(n_rows + dim));
      const CodeStream s = quantize_to_codes(x, n_rows, dim, bits, 32);
      const auto bytes = encode(s);
      SCOPED_TRACE("bits " + std::to_string(bits) + " rows " + std::to_string(n_rows) + " dim " +
                   std::to_string(dim));
      expect_same_stream(decode(bytes), s);
      EXPECT_EQ(decode_to_half(bytes).size(), n_rows * dim);
      const auto ref = dequant_codes(s);
      const auto got = decode_to_half(bytes);
      for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(ref[i].bits, got[i].bits) << i;
      // Deterministic: encoding the decoded stream gives the same bytes.
      EXPECT_EQ(encode(decode(bytes)), bytes);
    }
  }
}

TEST_P(RoundTrip, SingleSymbolAndAllSymbolChannels) {
  const int bits = GetParam();
  const size_t n_syms = size_t{1} << bits, dim = 4;
  for (size_t n_rows : {size_t{1}, n_syms, 3 * n_syms + 5}) {
    std::vector<uint8_t> codes(n_rows * dim);
    for (size_t t = 0; t < n_rows; ++t) {
      codes[t * dim + 0] = static_cast<uint8_t>(n_syms - 1);            // single symbol
      codes[t * dim + 1] = static_cast<uint8_t>(t % n_syms);            // all symbols, ramp
      codes[t * dim + 2] = static_cast<uint8_t>((t * 7 + 3) % n_syms);  // all symbols, jumpy
      codes[t * dim + 3] = static_cast<uint8_t>((t * t) % n_syms);
    }
    const CodeStream s = test::make_stream(codes, n_rows, dim, bits, 32);
    const auto bytes = encode(s);
    expect_same_stream(decode(bytes), s);
    // Never above fixed-width packing (fp16 params) plus a small constant.
    EXPECT_LE(bytes.size(), fixed_width_bytes(s) + 160 + dim / 4) << "rows " << n_rows;
  }
}

TEST_P(RoundTrip, EncodeValuesReproducesItsQuantization) {
  const int bits = GetParam();
  // Reused by quantize_values_into: first a larger stream of other bits, then each below.
  CodeStream reused = quantize_values(test::random_walk(600, 16, 1.0f, 3), 600, 16, 9 - bits, 32);
  for (size_t n_rows : {size_t{1}, size_t{33}, size_t{512}}) {
    const auto x = test::random_walk(n_rows, 16, 0.2f, 7);
    CodeStream q;
    const auto bytes = encode_values(x, n_rows, 16, bits, 32, {}, &q);
    expect_same_stream(decode(bytes), q);
    expect_same_stream(quantize_values(x, n_rows, 16, bits, 32), q);  // the same quantization
    quantize_values_into(x, n_rows, 16, bits, 32, {}, reused);
    expect_same_stream(reused, q);
    // Reconstruction error stays within half a (slightly widened) step.
    const auto rec = decode_to_half(bytes);
    for (size_t t = 0; t < n_rows; ++t)
      for (size_t c = 0; c < 16; ++c) {
        const float step = q.scale[(t / 32) * 16 + c];
        EXPECT_LE(std::abs(half_to_float(rec[t * 16 + c]) - x[t * 16 + c]),
                  step * 0.5f + 2e-3f * (1.0f + std::abs(x[t * 16 + c])));
      }
  }
}

INSTANTIATE_TEST_SUITE_P(AllBits, RoundTrip, ::testing::Range(1, 9));

TEST(Codec, EncodeBytesIndependentOfSimdPath) {
  // 32-lane payloads (>= 16384 elements) whose length is not a multiple of 32 (a scalar tail
  // step), with channel counts below, not dividing and dividing 16, a constant channel
  // (precision 0 when alone) and every alphabet width class.
  struct Shape {
    size_t rows, dim;
    int bits;
  };
  for (const Shape sh : {Shape{16391, 1, 3}, Shape{2341, 7, 4}, Shape{520, 64, 2},
                         Shape{3000, 6, 8}, Shape{16384, 1, 1}}) {
    auto x = test::random_walk(sh.rows, sh.dim, 0.2f, static_cast<uint32_t>(sh.rows));
    for (size_t t = 0; t < sh.rows; ++t) x[t * sh.dim] = sh.dim > 1 ? 0.5f : x[t * sh.dim];
    const CodeStream s = quantize_to_codes(x, sh.rows, sh.dim, sh.bits, 32);
    set_simd_path(SimdPath::scalar);
    const auto scalar = encode(s);
    set_simd_path(best_supported_simd_path());
    EXPECT_EQ(encode(s), scalar) << sh.rows << "x" << sh.dim << " at " << sh.bits << " bits";
    expect_same_stream(decode(scalar), s);
  }
  {  // every channel constant: coder precision 0
    const CodeStream s = quantize_to_codes(std::vector<float>(20000, 1.0f), 20000, 1, 3, 32);
    set_simd_path(SimdPath::scalar);
    const auto scalar = encode(s);
    set_simd_path(best_supported_simd_path());
    EXPECT_EQ(encode(s), scalar);
  }
}

TEST(Codec, BatchValuesFromHalfMatchWidenedFloats) {
  // Heads of 8 x 33 values (rows of one vector) and 40 x 33 (vector and scalar columns), one
  // head of subnormals (a range of a few 2^-24): quantised straight from fp16, the bytes and
  // codes of the widened fp32 values; a NaN is refused as from fp32.
  const size_t heads = 3, rows = 33;
  for (const size_t dim : {8u, 40u}) {
    const auto x = test::random_walk(heads * rows, dim, 0.3f, 11);
    std::vector<Half> h(x.size());
    std::vector<float> widened(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      h[i] = i < rows * dim ? Half{static_cast<uint16_t>(i % 5)} : float_to_half(x[i]);
      widened[i] = half_to_float(h[i]);
    }
    for (const int bits : {2, 5}) {
      set_thread_count(2);
      EXPECT_EQ(encode_values_batch(h, heads, rows, dim, bits),
                encode_values_batch(widened, heads, rows, dim, bits));
      set_thread_count(0);
      for (size_t head = 0; head < heads; ++head) {
        CodeStream from_half, from_float;
        const size_t n = rows * dim;
        quantize_values_into(std::span<const Half>(h).subspan(head * n, n), rows, dim, bits, 32, {},
                             from_half);
        quantize_values_into(std::span<const float>(widened).subspan(head * n, n), rows, dim, bits,
                             32, {}, from_float);
        EXPECT_EQ(from_half.codes, from_float.codes);
        EXPECT_EQ(from_half.scale, from_float.scale);
        EXPECT_EQ(from_half.zero, from_float.zero);
      }
    }
    h[heads * rows * dim - 1] = Half{0x7e00};
    EXPECT_THROW(encode_values_batch(h, heads, rows, dim, 3), Error);
    EXPECT_THROW(encode_values_batch(std::span<const Half>(h).first(5), heads, rows, dim, 3),
                 Error);
  }
}

TEST(Codec, BatchRoundTripIndependentOfThreads) {
  const size_t heads = 5, rows = 300, dim = 8;
  const auto x = test::random_walk(heads * rows, dim, 0.1f, 3);
  const auto streams = quantize_to_codes_batch(x, heads, rows, dim, 4, 32);
  set_thread_count(1);
  const auto one = encode_batch(streams);
  const auto values_one = encode_values_batch(x, heads, rows, dim, 3);
  set_thread_count(4);
  const auto four = encode_batch(streams);
  const auto values_four = encode_values_batch(x, heads, rows, dim, 3);
  set_thread_count(0);
  EXPECT_EQ(one, four);
  EXPECT_EQ(values_one, values_four);
  const auto back = decode_batch(one);
  ASSERT_EQ(back.size(), heads);
  for (size_t h = 0; h < heads; ++h) expect_same_stream(back[h], streams[h]);
  const auto ref = dequant_codes_batch(streams);
  const auto got = decode_batch_to_half(one);
  ASSERT_EQ(ref.size(), got.size());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(ref[i].bits, got[i].bits);
  EXPECT_TRUE(decode_batch(encode_batch({})).empty());
}

TEST(Codec, ConstantGroupsAndZeroDim) {
  std::vector<float> x(64 * 4, 1.5f);
  const CodeStream s = quantize_to_codes(x, 64, 4, 3, 32);
  expect_same_stream(decode(encode(s)), s);
  CodeStream q;
  const auto bytes = encode_values(x, 64, 4, 3, 32, {}, &q);
  expect_same_stream(decode(bytes), q);
  EXPECT_LT(bytes.size(), 64u);
}

TEST(Codec, RejectsBadOptions) {
  const CodeStream s = quantize_to_codes(std::vector<float>(32, 1.0f), 4, 8, 3, 32);
  EncodeOptions o;
  o.scale_mantissa_bits = 0;
  EXPECT_THROW(encode(s, o), Error);
  CodeStream bad = s;
  bad.codes[0] = 200;
  EXPECT_THROW(encode(bad), Error);
}

TEST(Codec, BatchesReportTheFirstBadStream) {
  // Streams checked in parallel (large enough for every thread) still report the first bad
  // stream in order: here stream 3's code above 2^bits - 1, not stream 9's short codes.
  const size_t heads = 16, rows = 4096, dim = 64;
  const auto x = test::random_walk(heads * rows, dim, 0.1f, 21);
  std::vector<CodeStream> streams = quantize_to_codes_batch(x, heads, rows, dim, 3, 32);
  streams[3].codes[5] = 200;
  streams[9].codes.pop_back();
  for (const size_t threads : {size_t{1}, size_t{2}, size_t{4}}) {
    set_thread_count(threads);
    for (int round = 0; round < 5; ++round) {
      try {
        (void)encode_batch(streams);
        ADD_FAILURE() << "a bad batch was encoded";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("holds 200"), std::string::npos)
            << threads << " threads: " << e.what();
      }
    }
  }
  set_thread_count(0);
}

// The internal entry for callers that hold the codes' histograms (the lossless tier): the same
// bytes as encode, padded rows excluded from the counts; counts of another shape are refused.
TEST(Codec, GivenHistogramsGiveEncodesBytes) {
  for (const int bits : {3, 8}) {
    for (const size_t dim : {size_t{1}, size_t{8}}) {
      const size_t n_rows = 70;  // groups of 32: the last one padded
      const auto x = test::random_walk(n_rows, dim, 0.12f, static_cast<uint32_t>(bits + dim));
      const CodeStream s = quantize_to_codes(x, n_rows, dim, bits, 32);
      ASSERT_GT(s.codes.size(), n_rows * dim);
      const size_t n_syms = size_t{1} << bits;
      std::vector<uint32_t> counts(dim * n_syms, 0);
      for (size_t i = 0; i < n_rows * dim; ++i) ++counts[(i % dim) * n_syms + s.codes[i]];
      SCOPED_TRACE("bits " + std::to_string(bits) + " dim " + std::to_string(dim));
      EXPECT_EQ(detail::encode_counted(s, {}, counts), encode(s));
      counts.pop_back();
      EXPECT_THROW(detail::encode_counted(s, {}, counts), Error);
    }
  }
}

// EncodeOptions::wide_lanes_from: 32 lanes from that many elements, the same codes back; one
// element fewer than it and the stream is the default's (8 lanes below 16384).
TEST(Codec, WideLanesFromGivesThirtyTwoLanes) {
  const size_t n_rows = 1000, dim = 8;  // 8000 elements: 8 lanes by default
  const auto x = test::random_walk(n_rows, dim, 0.12f, 9);
  const CodeStream s = quantize_to_codes(x, n_rows, dim, 8, 32);
  const auto lanes = [](const std::vector<uint8_t>& bytes) {
    const auto body = detail::check_magic(bytes, detail::kStreamMagic, "codec stream");
    return detail::parse_head(body, 5, {}).n_lanes;
  };
  const std::vector<uint8_t> narrow = encode(s);
  EncodeOptions wide_options;
  wide_options.wide_lanes_from = 8000;
  const std::vector<uint8_t> wide = encode(s, wide_options);
  EXPECT_EQ(lanes(narrow), 8);
  EXPECT_EQ(lanes(wide), 32);
  expect_same_stream(decode(wide), s);
  wide_options.wide_lanes_from = 8001;
  EXPECT_EQ(encode(s, wide_options), narrow);
}

}  // namespace
}  // namespace cachegen

namespace cachegen {
namespace {

using test::batch_layout;

// Layout 1 (a model per channel): what readers before layout 2 read.
EncodeOptions per_channel_models() {
  EncodeOptions o;
  o.allow_one_model = false;
  return o;
}

TEST(CodecSharedBatch, ShortSameShapeHeadsShareModelsAndRoundTrip) {
  // Real-KV-like: many short heads of 8 channels; slices of 4 heads, G not a multiple of 4.
  for (size_t heads : {size_t{2}, size_t{5}, size_t{11}}) {
    for (int bits : {2, 3, 4, 6}) {
      const size_t rows = 512, dim = 8;
      const auto x = test::random_walk(heads * rows, dim, 0.1f, static_cast<uint32_t>(heads));
      const auto streams = quantize_to_codes_batch(x, heads, rows, dim, bits, 32);
      const auto bytes = encode_batch(streams, per_channel_models());
      SCOPED_TRACE("heads " + std::to_string(heads) + " bits " + std::to_string(bits));
      EXPECT_EQ(batch_layout(bytes), 1);
      size_t independent = 0;
      for (const auto& s : streams) independent += encode(s).size();
      EXPECT_LT(bytes.size(), independent);
      const auto back = decode_batch(bytes);
      ASSERT_EQ(back.size(), heads);
      for (size_t h = 0; h < heads; ++h) test::expect_same_stream(back[h], streams[h]);
      const auto ref = dequant_codes_batch(streams);
      const auto got = decode_batch_to_half(bytes);
      ASSERT_EQ(ref.size(), got.size());
      for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(ref[i].bits, got[i].bits) << i;
      // encode_values_batch takes the same path and stays consistent with its quantization.
      const auto vbytes = encode_values_batch(x, heads, rows, dim, bits, 32, per_channel_models());
      EXPECT_EQ(batch_layout(vbytes), 1);
      EXPECT_EQ(decode_batch_to_half(vbytes).size(), heads * rows * dim);
    }
  }
}

// Layout 2: one model for every channel where the channels' distributions are alike (the
// pooled table costs less than their differences), a model per channel where they are not;
// every width (search and slot tables), one head or many, every SIMD path.
TEST(CodecSharedBatch, OneModelForChannelsAlike) {
  for (const size_t heads : {size_t{1}, size_t{3}, size_t{40}}) {
    for (const int bits : {1, 2, 3, 4, 5, 6, 8}) {
      const size_t rows = 256, dim = 16;
      SCOPED_TRACE("heads " + std::to_string(heads) + " bits " + std::to_string(bits));
      const auto x = test::iid_normal(heads * rows * dim, static_cast<uint32_t>(7 * heads + bits));
      const auto streams = quantize_to_codes_batch(x, heads, rows, dim, bits, 32);
      const auto bytes = encode_batch(streams);
      ASSERT_EQ(batch_layout(bytes), 2);
      if (heads > 1) {
        EXPECT_LT(bytes.size(), encode_batch(streams, per_channel_models()).size());
      }
      const auto ref = dequant_codes_batch(streams);
      for (SimdPath p : test::supported_simd_paths()) {
        set_simd_path(p);
        const auto back = decode_batch(bytes);
        ASSERT_EQ(back.size(), heads);
        for (size_t h = 0; h < heads; ++h) test::expect_same_stream(back[h], streams[h]);
        const auto got = decode_batch_to_half(bytes);
        ASSERT_EQ(ref.size(), got.size());
        for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(ref[i].bits, got[i].bits) << i;
        std::vector<Half> rows_out(ref.size());
        decode_batch_to_rows(bytes, {heads, rows, dim, bits, 32}, rows_out);
        for (size_t h = 0; h < heads; ++h)
          for (size_t t = 0; t < rows; ++t)
            for (size_t c = 0; c < dim; ++c)
              ASSERT_EQ(rows_out[(t * heads + h) * dim + c].bits,
                        ref[(h * rows + t) * dim + c].bits);
      }
      set_simd_path(best_supported_simd_path());
    }
  }
  // Channels unlike each other (half of them a slow walk, coded as deltas; half noise of
  // another spread): a model each.
  const size_t heads = 4, rows = 512, dim = 16;
  const auto walk = test::random_walk(heads * rows, dim, 0.02f, 3);
  const auto noise = test::iid_normal(heads * rows * dim, 4);
  std::vector<float> x(walk.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % dim) < dim / 2 ? walk[i] : noise[i];
  const auto streams = quantize_to_codes_batch(x, heads, rows, dim, 4, 32);
  const auto bytes = encode_batch(streams);
  EXPECT_EQ(batch_layout(bytes), 1);
  const auto back = decode_batch(bytes);
  for (size_t h = 0; h < heads; ++h) test::expect_same_stream(back[h], streams[h]);
  // One such head: its record (layout 0).
  const std::vector<CodeStream> one(streams.begin(), streams.begin() + 1);
  const auto alone = encode_batch(one);
  EXPECT_EQ(batch_layout(alone), 0);
  test::expect_same_stream(decode_batch(alone).at(0), streams[0]);
}

TEST(CodecSharedBatch, PairsOfBatchesWriteEachOnesBytes) {
  // A cache's K and V blocks coded together (detail::encode_batch_pair): short shared batches
  // of one 8-lane slice each (in lockstep), either of them or both of several slices, of
  // independent records (mixed shapes, one head) or empty, on every SIMD path.
  struct Side {
    size_t heads, rows, dim;
    int bits;
  };
  const std::pair<Side, Side> cases[] = {
      {{4, 256, 8, 3}, {4, 256, 8, 3}},  {{4, 256, 8, 3}, {2, 512, 8, 2}},
      {{2, 64, 64, 3}, {2, 64, 64, 3}},  {{40, 512, 8, 3}, {4, 256, 8, 3}},
      {{4, 256, 8, 3}, {1, 256, 8, 3}},  {{0, 256, 8, 3}, {4, 256, 8, 3}},
      {{4, 256, 8, 3}, {40, 512, 8, 3}}, {{3, 96, 8, 4}, {5, 96, 16, 1}},
  };
  uint32_t seed = 40;
  for (const auto& [a, b] : cases) {
    std::vector<CodeStream> streams[2];
    int k = 0;
    for (const Side& side : {a, b}) {
      const auto x = test::random_walk(side.heads * side.rows, side.dim, 0.1f, seed++);
      streams[k++] = quantize_to_codes_batch(x, side.heads, side.rows, side.dim, side.bits, 32);
    }
    if (a.heads == 4 && b.heads == 1) {  // mixed shapes: independent records
      streams[0][1] = quantize_to_codes(test::random_walk(128, 8, 0.1f, seed++), 128, 8, 3, 32);
    }
    SCOPED_TRACE("heads " + std::to_string(a.heads) + ", " + std::to_string(b.heads) + " rows " +
                 std::to_string(a.rows) + ", " + std::to_string(b.rows));
    const std::vector<uint8_t> want[2] = {encode_batch(streams[0]), encode_batch(streams[1])};
    for (SimdPath p : test::supported_simd_paths()) {
      set_simd_path(p);
      const auto got = detail::encode_batch_pair(streams[0], streams[1], EncodeOptions{});
      EXPECT_EQ(got[0], want[0]) << simd_path_name(p);
      EXPECT_EQ(got[1], want[1]) << simd_path_name(p);
    }
  }
  set_simd_path(best_supported_simd_path());
}

TEST(CodecSharedBatch, CloseChoicesCountEveryExactEstimate) {
  // Independent walks at 5 bits over 64 channels, `heads` of them: the per-channel lower bounds
  // leave the choice open. Two heads of 256 rows: the shared layout wins by 0.2% only once most
  // channels' exact estimates are in (an estimate that dropped part of any channel's rise
  // picked separate records). Three of 128 rows (192 channels: the search's smallest 128
  // first, then the rest): separate records win by 8 bytes of 15.5 K only once every channel's
  // estimate is in (one counted twice picked the shared layout).
  struct Case {
    size_t heads, rows;
    float step;
    int layout;
  };
  for (const Case& k : {Case{2, 256, 0.3f, 1}, Case{3, 128, 0.3f, 0}}) {
    const size_t dim = 64;
    std::vector<CodeStream> streams;
    for (uint32_t seed = 100; seed < 100 + k.heads; ++seed) {
      std::mt19937 rng(seed);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> x(k.rows * dim), level(dim, 0.0f);
      for (size_t r = 0; r < k.rows; ++r) {
        for (size_t c = 0; c < dim; ++c) {
          level[c] += k.step * nd(rng);
          x[r * dim + c] = level[c] + 0.5f * nd(rng);
        }
      }
      streams.push_back(quantize_to_codes(x, k.rows, dim, 5, 32));
    }
    for (const size_t threads : {1, 2}) {
      SCOPED_TRACE(std::to_string(k.heads) + " heads, " + std::to_string(threads) + " threads");
      set_thread_count(threads);
      const auto bytes = encode_batch(streams, per_channel_models());
      EXPECT_EQ(batch_layout(bytes), k.layout);
      size_t independent = 0;
      for (const auto& s : streams) independent += encode(s).size();
      if (k.layout == 1) {
        EXPECT_LT(bytes.size(), independent);
      }
      const auto back = decode_batch(bytes);
      ASSERT_EQ(back.size(), k.heads);
      for (size_t h = 0; h < k.heads; ++h) test::expect_same_stream(back[h], streams[h]);
    }
  }
  set_thread_count(0);
}

TEST(CodecSharedBatch, MixedShapesFallBackToIndependentRecords) {
  const auto a = quantize_to_codes(test::random_walk(100, 8, 0.1f, 1), 100, 8, 3, 32);
  const auto b = quantize_to_codes(test::random_walk(60, 8, 0.1f, 2), 60, 8, 3, 32);
  const std::vector<CodeStream> streams = {a, b};
  const auto bytes = encode_batch(streams);
  EXPECT_EQ(batch_layout(bytes), 0);
  const auto back = decode_batch(bytes);
  test::expect_same_stream(back[0], a);
  test::expect_same_stream(back[1], b);
  EXPECT_THROW(decode_batch_to_half(bytes), Error);
}

TEST(CodecSharedBatch, DecodeIntoBuffersIsTheHalfDecode) {
  // Both layouts, narrow and wide heads (the widened and the per-row kernels), all threads.
  for (const size_t dim : {size_t{8}, size_t{64}, size_t{72}}) {
    for (const bool shared : {true, false}) {
      const size_t heads = 3, rows = shared ? 300 : 40;
      const auto x = test::random_walk(heads * rows, dim, 0.1f, static_cast<uint32_t>(dim));
      std::vector<uint8_t> bytes = encode_values_batch(x, heads, rows, dim, 4, 32);
      if (!shared) {  // layout 0 written by hand: each head's record, as encode() codes it
        std::vector<std::vector<uint8_t>> records;
        for (size_t h = 0; h < heads; ++h) {
          records.push_back(encode_values(
              std::span<const float>(x).subspan(h * rows * dim, rows * dim), rows, dim, 4, 32));
        }
        bytes = test::independent_batch(records);
        EXPECT_EQ(batch_layout(bytes), 0);
      }
      SCOPED_TRACE("dim " + std::to_string(dim) + (shared ? " shared" : " independent"));
      const std::vector<Half> ref = decode_batch_to_half(bytes);
      // Into the caller's buffer: every value written (none left at the fill), the same bits; a
      // buffer of another size is an invalid argument and stays as it was.
      std::vector<Half> into(ref.size(), Half{0xffff});
      decode_batch_to_half(bytes, into);
      for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(into[i].bits, ref[i].bits) << i;
      for (const size_t n : {ref.size() - 1, ref.size() + 1}) {
        std::vector<Half> wrong(n, Half{0x1234});
        try {
          decode_batch_to_half(bytes, wrong);
          ADD_FAILURE() << "no throw";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
        }
        for (const Half h : wrong) ASSERT_EQ(h.bits, 0x1234);
      }
      std::vector<Half> out(heads * rows * dim);
      decode_batch_to_rows(bytes, {heads, rows, dim, 4, 32}, out);
      for (size_t h = 0; h < heads; ++h)
        for (size_t t = 0; t < rows; ++t)
          for (size_t c = 0; c < dim; ++c)
            ASSERT_EQ(out[(t * heads + h) * dim + c].bits, ref[(h * rows + t) * dim + c].bits);
      // Another shape than the caller's is corrupt input; a wrong buffer an invalid argument.
      for (const BatchShape bad :
           {BatchShape{heads + 1, rows, dim, 4, 32}, BatchShape{heads, rows, dim, 3, 32},
            BatchShape{heads, rows, dim, 4, 64}}) {
        std::vector<Half> o(bad.n_heads * bad.n_rows * bad.dim);
        try {
          decode_batch_to_rows(bytes, bad, o);
          ADD_FAILURE() << "no throw";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::corrupt_input) << e.what();
        }
      }
      std::vector<Half> small(out.size() - 1);
      try {
        decode_batch_to_rows(bytes, {heads, rows, dim, 4, 32}, small);
        ADD_FAILURE() << "no throw";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
      }
    }
  }
}

TEST(CodecSharedBatch, SizeReportAddsUpForBothLayouts) {
  const size_t heads = 5, rows = 512, dim = 8;
  const auto x = test::random_walk(heads * rows, dim, 0.1f, 3);
  const auto streams = quantize_to_codes_batch(x, heads, rows, dim, 3, 32);
  const auto shared = encode_batch(streams, per_channel_models());
  ASSERT_EQ(batch_layout(shared), 1);
  const CodedSizeReport rs = coded_size_report_batch(shared);
  EXPECT_EQ(rs.coded_bytes, shared.size());
  EXPECT_EQ(rs.header_bytes + rs.param_bytes + rs.model_bytes + rs.payload_bytes, shared.size());
  // Parameters are stored exactly as in the single records.
  size_t params = 0;
  for (const auto& s : streams) params += coded_size_report(encode(s)).param_bytes;
  EXPECT_GE(rs.param_bytes, params);
  EXPECT_LE(rs.param_bytes, params + 8 * heads);
  EXPECT_GT(rs.payload_bytes, 0u);
  // One model for every channel: the same parameters, one model's bytes.
  const auto one = encode_batch(streams);
  ASSERT_EQ(batch_layout(one), 2);
  const CodedSizeReport r1 = coded_size_report_batch(one);
  EXPECT_EQ(r1.header_bytes + r1.param_bytes + r1.model_bytes + r1.payload_bytes, one.size());
  EXPECT_EQ(r1.param_bytes, rs.param_bytes);
  EXPECT_LT(r1.model_bytes, rs.model_bytes);

  const auto a = quantize_to_codes(test::random_walk(100, 8, 0.1f, 1), 100, 8, 3, 32);
  const auto b = quantize_to_codes(test::random_walk(60, 8, 0.1f, 2), 60, 8, 3, 32);
  const std::vector<CodeStream> mixed = {a, b};
  const auto independent = encode_batch(mixed);
  ASSERT_EQ(batch_layout(independent), 0);
  const CodedSizeReport ri = coded_size_report_batch(independent);
  EXPECT_EQ(ri.header_bytes + ri.param_bytes + ri.model_bytes + ri.payload_bytes,
            independent.size());
  EXPECT_EQ(ri.param_bytes,
            coded_size_report(encode(a)).param_bytes + coded_size_report(encode(b)).param_bytes);
  EXPECT_GT(ri.code_entropy_bytes, 0.0);
}

// A shared batch's slices take their lanes from EncodeOptions::wide_lanes_from, as streams and
// head records do: 4 heads of 256 x 8 (a stories260K .cgkv chunk tensor) are one slice of 8,192
// elements, 8 lanes by default, 32 from 8,192; in a pair (a cache's K and V blocks) too.
TEST(CodecSharedBatch, WideLanesFromAppliesToSlices) {
  const size_t heads = 4, rows = 256, dim = 8;
  const auto x = test::random_walk(heads * rows, dim, 0.1f, 17);
  const auto streams = quantize_to_codes_batch(x, heads, rows, dim, 3, 32);
  EncodeOptions wide_options;
  wide_options.wide_lanes_from = heads * rows * dim;
  for (const bool one_model : {false, true}) {
    wide_options.allow_one_model = one_model;
    EncodeOptions narrow_options = wide_options;
    narrow_options.wide_lanes_from = EncodeOptions{}.wide_lanes_from;
    const auto narrow = encode_batch(streams, narrow_options);
    const auto wide = encode_batch(streams, wide_options);
    SCOPED_TRACE(one_model ? "one model" : "a model per channel");
    ASSERT_EQ(batch_layout(narrow), one_model ? 2 : 1);
    ASSERT_EQ(batch_layout(wide), batch_layout(narrow));
    // 24 more 4-byte lane states (the words themselves move by a few).
    const CodedSizeReport rn = coded_size_report_batch(narrow), rw = coded_size_report_batch(wide);
    EXPECT_GT(rw.payload_bytes, rn.payload_bytes + 48);
    EXPECT_EQ(rw.model_bytes, rn.model_bytes);
    const auto back = decode_batch(wide);
    ASSERT_EQ(back.size(), heads);
    for (size_t h = 0; h < heads; ++h) EXPECT_EQ(back[h].codes, streams[h].codes) << h;
    const auto pair = detail::encode_batch_pair(streams, streams, wide_options);
    EXPECT_EQ(pair[0], wide);
    EXPECT_EQ(pair[1], wide);
    wide_options.wide_lanes_from += 1;
    EXPECT_EQ(encode_batch(streams, wide_options), narrow);
    wide_options.wide_lanes_from -= 1;
  }
}

// Heads of 16K elements take a slice each, and where no channel codes deltas the encoder reads
// each head's codes where they lie: every head decodes to its own codes.
TEST(CodecSharedBatch, SlicesOfOneHeadCodeTheirOwnCodes) {
  const size_t heads = 3, rows = 1024, dim = 16;
  std::mt19937 rng(5);
  std::vector<CodeStream> streams(heads);
  for (CodeStream& s : streams) {
    s = quantize_to_codes(test::random_walk(rows, dim, 0.1f, static_cast<uint32_t>(rng())), rows,
                          dim, 3, 32);
    for (uint8_t& c : s.codes) c = static_cast<uint8_t>(rng() % 8);  // no use for deltas
  }
  for (const bool one_model : {false, true}) {
    for (const bool allow_delta : {false, true}) {
      EncodeOptions options;
      options.allow_one_model = one_model;
      options.allow_delta = allow_delta;
      const auto bytes = encode_batch(streams, options);
      ASSERT_EQ(batch_layout(bytes), one_model ? 2 : 1);
      const auto back = decode_batch(bytes);
      ASSERT_EQ(back.size(), heads);
      for (size_t h = 0; h < heads; ++h) EXPECT_EQ(back[h].codes, streams[h].codes) << h;
    }
  }
}

TEST(CodecSharedBatch, LargeBatchesMakeTheirDeltaSymbolsAgain) {
  // Codes past the encoder's kept delta symbols (256 KiB: 9 heads of 1,024 x 32 here): their
  // delta symbols are counted, dropped and made again for the payloads. Half the channels are
  // walks (delta wins), half noise (raw wins); heads differ, so a head's payload coded from
  // another's delta symbols does not round-trip.
  const size_t heads = 9, rows = 1024, dim = 32;
  std::mt19937 rng(11);
  std::vector<float> x(heads * rows * dim);
  for (size_t h = 0; h < heads; ++h) {
    const auto walk = test::random_walk(rows, dim, 0.05f, static_cast<uint32_t>(rng()));
    const auto noise = test::iid_normal(rows * dim, static_cast<uint32_t>(rng()));
    for (size_t i = 0; i < rows * dim; ++i)
      x[h * rows * dim + i] = (i % dim) % 2 == 0 ? walk[i] : noise[i];
  }
  const auto streams = quantize_to_codes_batch(x, heads, rows, dim, 3, 32);
  for (const size_t threads : {size_t{1}, size_t{3}}) {
    set_thread_count(threads);
    const auto bytes = encode_batch(streams);
    EncodeOptions raw_only;
    raw_only.allow_delta = false;
    EXPECT_LT(bytes.size(), encode_batch(streams, raw_only).size()) << "no delta channels";
    ASSERT_EQ(batch_layout(bytes), 1);
    const auto back = decode_batch(bytes);
    ASSERT_EQ(back.size(), heads);
    for (size_t h = 0; h < heads; ++h) EXPECT_EQ(back[h].codes, streams[h].codes) << h;
  }
  set_thread_count(0);
}

TEST(CodecSharedBatch, IndependentOfThreads) {
  const size_t heads = 7, rows = 700, dim = 16;
  const auto x = test::random_walk(heads * rows, dim, 0.1f, 9);
  const auto streams = quantize_to_codes_batch(x, heads, rows, dim, 3, 32);
  set_thread_count(1);
  const auto one = encode_batch(streams);
  const auto half_one = decode_batch_to_half(one);
  set_thread_count(3);
  const auto three = encode_batch(streams);
  const auto half_three = decode_batch_to_half(one);
  set_thread_count(0);
  EXPECT_EQ(one, three);
  ASSERT_EQ(half_one.size(), half_three.size());
  for (size_t i = 0; i < half_one.size(); ++i) ASSERT_EQ(half_one[i].bits, half_three[i].bits);
}

}  // namespace
}  // namespace cachegen
