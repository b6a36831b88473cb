// .cgkv round trips: quantized and lossless, token ranges, blobs, files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "cachegen/encode.h"
#include "cachegen/error.h"
#include "cachegen/npy.h"
#include "cachegen/runtime.h"
#include "container/cgkv_internal.h"
#include "container/container_test_util.h"

namespace cachegen {
namespace {

using test::filled_cache;

// The cache's own reconstruction, token-major [n_attn, 2, T, H, D].
std::vector<Half> cache_fetch(const KVCache& c) {
  const size_t T = c.n_tokens(), H = 2, D = 8;
  std::vector<Half> out(c.layers.size() * 2 * T * H * D);
  size_t t = 0;
  for (const LayerKVCache& l : c.layers) {
    for (int kind = 0; kind < 2; ++kind, ++t) {
      const std::vector<Half> hm = kind ? l.fetch_values() : l.fetch_keys();
      for (size_t tok = 0; tok < T; ++tok) {
        for (size_t h = 0; h < H; ++h) {
          std::memcpy(out.data() + ((t * T + tok) * H + h) * D, hm.data() + (h * T + tok) * D,
                      D * 2);
        }
      }
    }
  }
  return out;
}

class QuantizedRoundTrip : public ::testing::TestWithParam<size_t> {};

TEST_P(QuantizedRoundTrip, ReadBackEqualsTheCacheExceptTheTail) {
  const size_t T = GetParam();
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  const test::Filled f = filled_cache(T, cfg);
  const std::vector<uint8_t> file = write_cgkv(f.cache);
  const CgkvReader r = CgkvReader::from_bytes(file);
  const CgkvInfo& info = r.info();
  EXPECT_EQ(info.n_tokens, T);
  EXPECT_EQ(info.chunks.size(), (T + 63) / 64);
  EXPECT_EQ(info.n_attention_layers(), 2);
  EXPECT_EQ(info.layers[0].key_bits, f.cache.layers[0].key_bits());
  EXPECT_FALSE(info.layers[1].attention);
  const std::vector<Half> got = r.read_tokens(0, T);
  const std::vector<Half> want = cache_fetch(f.cache);
  ASSERT_EQ(got.size(), want.size());
  // Whole groups are identical; the residual tail (< group) is quantized in the file.
  const size_t exact = T / 32 * 32, row = 16;
  for (size_t t = 0; t < 4; ++t) {
    EXPECT_EQ(0, std::memcmp(got.data() + t * T * row, want.data() + t * T * row, exact * row * 2));
    for (size_t i = exact * row; i < T * row; ++i) {
      EXPECT_NEAR(half_to_float(got[t * T * row + i]), half_to_float(want[t * T * row + i]), 0.5f);
    }
  }
  r.verify();
  // Every sub-range equals the same slice of the whole.
  for (auto [a, b] : {std::pair<size_t, size_t>{0, 1}, {63, 65}, {T / 3, T}, {T, T}}) {
    if (b > T) continue;
    const std::vector<Half> part = r.read_tokens(a, b);
    ASSERT_EQ(part.size(), 4 * (b - a) * row);
    if (part.empty()) continue;  // memcmp's pointers must not be null, even for 0 bytes
    for (size_t t = 0; t < 4; ++t) {
      ASSERT_EQ(0, std::memcmp(part.data() + t * (b - a) * row, got.data() + (t * T + a) * row,
                               (b - a) * row * 2));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, QuantizedRoundTrip, ::testing::Values(1, 31, 32, 64, 65, 200, 512));

// A KV array [L, 2, T, H, D] of random walks, token-major as .npy captures are.
std::vector<Half> kv_array(size_t L, size_t T, size_t H, size_t D) {
  const size_t row = H * D;
  std::vector<Half> kv(L * 2 * T * row);
  for (size_t t = 0; t < 2 * L; ++t) {
    const std::vector<Half> hm = test::kv_walk(H, T, D, 40 + static_cast<uint32_t>(t));
    for (size_t tok = 0; tok < T; ++tok)
      for (size_t h = 0; h < H; ++h)
        std::memcpy(kv.data() + (t * T + tok) * row + h * D, hm.data() + (h * T + tok) * D, D * 2);
  }
  return kv;
}

// The layers of kv_array's array.
KVArrayView array_view(const std::vector<Half>& kv, size_t L, size_t T, size_t H, size_t D) {
  KVArrayView view;
  view.n_tokens = T;
  view.n_kv_heads = H;
  view.head_dim = D;
  for (size_t l = 0; l < L; ++l) view.layers.push_back(kv.data() + l * 2 * T * H * D);
  return view;
}

// A lossless file's default chunk: 1,024 tokens for a narrow model, fewer for a wide one (8
// layers x 32 heads x 128 dims: 128 KiB a token, 256 tokens a chunk, as a reader holds one
// chunk's values); an explicit chunk size is kept.
TEST(Container, LosslessDefaultChunkFollowsTheWidth) {
  for (const auto& [L, H, D, chunk, expect] :
       {std::tuple{5u, 4u, 8u, 0u, 1024u}, std::tuple{8u, 32u, 128u, 0u, 256u},
        std::tuple{8u, 32u, 128u, 1024u, 1024u}}) {
    const size_t T = 3;
    const std::vector<Half> kv = kv_array(L, T, H, D);
    const size_t shape[5] = {L, 2, T, H, D};
    KVEncodeOptions o;
    o.lossless = true;
    o.chunk_tokens = chunk;
    const CgkvReader r = CgkvReader::from_bytes(
        encode_kv_array(array_view(kv, L, T, H, D),
                        kv_array_model_shape(shape, ErrorCode::invalid_argument, "kv"), o));
    EXPECT_EQ(r.info().chunk_tokens, expect) << L << " x " << H << " x " << D;
    const std::vector<Half> back = r.read_tokens(0, T);
    ASSERT_EQ(back.size(), kv.size());
    EXPECT_EQ(0, std::memcmp(back.data(), kv.data(), kv.size() * sizeof(Half)));
  }
}

// A stories260K-shaped file (4 heads x 8 dims, 256-token chunks: each tensor one 8-lane
// payload) of five layers: the reader decodes whole chunks two layers at a time (four payloads
// in lockstep) and the odd layer as a pair; sub-ranges decode tensor by tensor. Both agree, with
// one schedule (every payload's alphabet equal), with deeper layers at fewer bits (mixed
// alphabets within a group of four: decoded as pairs) and at 6 and 5 bits (slot tables: four
// gather chains).
TEST(Container, LayersDecodedTogetherMatchTensorByTensor) {
  const size_t L = 5, T = 512, H = 4, D = 8, row = H * D;
  const std::vector<Half> kv = kv_array(L, T, H, D);
  const KVArrayView view = array_view(kv, L, T, H, D);
  const size_t shape[5] = {L, 2, T, H, D};
  const ModelShape model = kv_array_model_shape(shape, ErrorCode::invalid_argument, "kv");
  // Chunks of 256 (two, decoded in parallel) and 512 tokens (one: its layers in parallel).
  set_thread_count(3);
  for (const auto& [bits, groups, chunk] :
       {std::tuple{3, 1, 256}, std::tuple{4, 3, 256}, std::tuple{1, 1, 256}, std::tuple{6, 2, 256},
        std::tuple{3, 1, 512}, std::tuple{6, 2, 512}}) {
    SCOPED_TRACE("bits " + std::to_string(bits) + ", layer groups " + std::to_string(groups) +
                 ", chunks of " + std::to_string(chunk));
    KVEncodeOptions o;
    o.bits = bits;
    o.layer_groups = groups;
    o.chunk_tokens = static_cast<size_t>(chunk);
    const CgkvReader r = CgkvReader::from_bytes(encode_kv_array(view, model, o));
    const std::vector<Half> whole = r.read_tokens(0, T);
    const std::vector<Half> head = r.read_tokens(0, T - 1), tail = r.read_tokens(T - 1, T);
    ASSERT_EQ(whole.size(), 2 * L * T * row);
    for (size_t t = 0; t < 2 * L; ++t) {
      ASSERT_EQ(0, std::memcmp(whole.data() + t * T * row, head.data() + t * (T - 1) * row,
                               (T - 1) * row * 2))
          << "tensor " << t;
      ASSERT_EQ(0,
                std::memcmp(whole.data() + (t * T + T - 1) * row, tail.data() + t * row, row * 2))
          << "tensor " << t;
    }
    // And close to the input (a wrong symbol anywhere would be far off at these bits).
    double err = 0;
    for (size_t i = 0; i < kv.size(); ++i)
      err = std::max(err, std::abs(double(half_to_float(whole[i])) - half_to_float(kv[i])));
    EXPECT_LT(err, 4.0);
  }
  set_thread_count(0);
}

// encode_kv_array fills the layers on the pool's threads: the same bytes on one thread and on
// four (a quantized and a pre-RoPE level file), progress reported in order up to the total, and
// a bad value in one layer still an error.
TEST(Container, ArrayEncodeIndependentOfThreads) {
  const size_t L = 5, T = 300, H = 2, D = 16;
  std::vector<Half> kv = kv_array(L, T, H, D);
  const KVArrayView view = array_view(kv, L, T, H, D);
  const size_t shape[5] = {L, 2, T, H, D};
  const ModelShape model = kv_array_model_shape(shape, ErrorCode::invalid_argument, "kv");
  KVEncodeOptions quantized, level;
  quantized.bits = 3;
  quantized.chunk_tokens = 64;
  level.level = "high";
  level.rope_base = 10000.0f;
  for (const KVEncodeOptions& o : {quantized, level}) {
    SCOPED_TRACE(o.level.empty() ? "3 bits" : "level high");
    set_thread_count(1);
    const std::vector<uint8_t> one = encode_kv_array(view, model, o);
    set_thread_count(4);
    std::vector<size_t> done;
    const std::vector<uint8_t> four = encode_kv_array(view, model, o, {}, [&](size_t d, size_t n) {
      EXPECT_EQ(n, L * T);
      done.push_back(d);
    });
    set_thread_count(0);
    EXPECT_EQ(one, four);
    ASSERT_FALSE(done.empty());
    EXPECT_EQ(done.back(), L * T);
    for (size_t i = 1; i < done.size(); ++i) EXPECT_LT(done[i - 1], done[i]);
  }
  kv[((3 * 2 + 1) * T + 250) * H * D + 7] = Half{0x7e00};  // layer 3, V, token 250: NaN
  set_thread_count(4);
  EXPECT_THROW(encode_kv_array(view, model, quantized), Error);
  set_thread_count(0);
}

// verify() decodes every tensor into one scratch buffer (resized as it goes): a chunk's groups of
// layers, which read_tokens_into decodes on the pool's threads, run one at a time there (on two
// threads they wrote and resized it at once: the Python hostile-bytes test crashed). Five narrow
// layers (8-lane tensors: four layers' K and V decoded together, then the fifth) on four
// threads; scripts/test.sh runs this under ThreadSanitizer.
TEST(Container, VerifyOnThreadsDecodesOneGroupAtATime) {
  const size_t L = 5, T = 256, H = 4, D = 8;
  const std::vector<Half> kv = kv_array(L, T, H, D);
  const size_t shape[5] = {L, 2, T, H, D};
  const ModelShape model = kv_array_model_shape(shape, ErrorCode::invalid_argument, "kv");
  KVEncodeOptions o;
  o.bits = 3;
  o.chunk_tokens = 128;
  const std::vector<uint8_t> file = encode_kv_array(array_view(kv, L, T, H, D), model, o);
  std::vector<uint8_t> bad = file;
  bad[bad.size() / 2] ^= 0x10;  // a chunk's checksum fails
  set_thread_count(1);
  const std::string want = [&] {
    try {
      CgkvReader::from_bytes(bad).verify();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  EXPECT_NE(want, "no error");
  set_thread_count(4);
  for (int round = 0; round < 4; ++round) {
    CgkvReader::from_bytes(file).verify();
    try {
      CgkvReader::from_bytes(bad).verify();
      ADD_FAILURE() << "the damaged file verified";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
  }
  set_thread_count(0);
}

TEST(Container, EmptyCacheWritesAValidFile) {
  KVCacheConfig cfg;
  const KVCache c = KVCacheBuilder::for_model(test::small_shape(), cfg);
  const CgkvReader r = CgkvReader::from_bytes(write_cgkv(c));
  EXPECT_EQ(r.info().n_tokens, 0u);
  EXPECT_TRUE(r.read_tokens(0, 0).empty());
  r.verify();
}

TEST(Container, LosslessIsExactAndSmallerThanFp16) {
  const size_t T = 300;
  KVCacheConfig cfg;
  const test::Filled f = filled_cache(T, cfg, 5);
  const std::vector<uint8_t> file = write_cgkv_lossless(test::small_shape(), f.kv, T, 128);
  const CgkvReader r = CgkvReader::from_bytes(file);
  EXPECT_EQ(r.info().codec, ContainerCodec::lossless_fp16);
  const std::vector<Half> got = r.read_tokens(0, T);
  ASSERT_EQ(got.size(), f.kv.size());
  EXPECT_EQ(0, std::memcmp(got.data(), f.kv.data(), got.size() * 2));
  EXPECT_LT(file.size(), f.kv.size() * 2);
  const std::vector<Half> mid = r.read_tokens(100, 200);
  EXPECT_EQ(0, std::memcmp(mid.data(), f.kv.data() + 100 * 16, 100 * 16 * 2));
}

TEST(Container, LosslessBytesDoNotDependOnThreads) {
  // Three attention layers: six tensors a chunk, so the writer's waves of tensors (four a
  // thread) end inside chunks; four chunks, the last one short, and a blob after them.
  ModelShape shape = test::small_shape();
  shape.attention = {true, true, true};
  const size_t T = 100;
  std::vector<Half> kv(3 * 2 * T * 16);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (Half& h : kv) h = float_to_half(nd(rng));
  std::vector<int32_t> ids(T);
  for (size_t t = 0; t < T; ++t) ids[t] = static_cast<int32_t>(t * 7 % 512);
  const std::vector<CgkvBlob> blobs{token_ids_blob(ids)};
  set_thread_count(1);
  const std::vector<uint8_t> one = write_cgkv_lossless(shape, kv, T, 32, blobs);
  for (const size_t threads : {2, 3}) {
    set_thread_count(threads);
    EXPECT_EQ(write_cgkv_lossless(shape, kv, T, 32, blobs), one) << threads << " threads";
  }
  set_thread_count(0);
  const CgkvReader r = CgkvReader::from_bytes(one);
  ASSERT_EQ(r.info().chunks.size(), 4u);
  const std::vector<Half> got = r.read_tokens(0, T);
  ASSERT_EQ(got.size(), kv.size());
  EXPECT_EQ(0, std::memcmp(got.data(), kv.data(), got.size() * 2));
  EXPECT_EQ(r.read_blob(static_cast<uint32_t>(BlobKind::token_ids)), blobs[0].bytes);
}

TEST(Container, LosslessIncompressibleValuesOutgrowTheWritersGuess) {
  // Random finite bit patterns: the file comes out larger than fp16 (the writer reserves about
  // fp16's size and must grow the file between waves) and still reads back exactly.
  const size_t T = 300;
  std::vector<Half> kv(2 * 2 * T * 16);  // small_shape: 2 attention layers, 2 heads of 8
  std::mt19937 rng(3);
  for (Half& h : kv) {
    do h.bits = static_cast<uint16_t>(rng());
    while ((h.bits & 0x7c00) == 0x7c00);
  }
  const std::vector<uint8_t> file = write_cgkv_lossless(test::small_shape(), kv, T, 64);
  EXPECT_GT(file.size(), kv.size() * 2);
  const std::vector<Half> got = CgkvReader::from_bytes(file).read_tokens(0, T);
  ASSERT_EQ(got.size(), kv.size());
  EXPECT_EQ(0, std::memcmp(got.data(), kv.data(), got.size() * 2));
}

TEST(Container, LosslessMethodsBothDecodeAndBadMethodsAreRejected) {
  KVCacheConfig cfg;
  const test::Filled f = filled_cache(200, cfg, 9);
  const std::span<const Half> values(f.kv.data(), 200 * 16);
  const std::vector<uint8_t> zstd_form = detail::pack_fp16_lossless(values, 0, 3);  // no width
  const std::vector<uint8_t> best = detail::pack_fp16_lossless(values, 16, 3);
  EXPECT_EQ(zstd_form[0], 0);
  EXPECT_LE(best.size(), zstd_form.size());
  for (const auto* packed : {&zstd_form, &best}) {
    std::vector<Half> out(values.size());
    detail::unpack_fp16_lossless(*packed, out, 16, "test");
    EXPECT_EQ(0, std::memcmp(out.data(), values.data(), out.size() * 2)) << int((*packed)[0]);
  }
  std::vector<Half> out(values.size());
  std::vector<uint8_t> bad = best;
  bad[0] = 7;
  EXPECT_THROW(detail::unpack_fp16_lossless(bad, out, 16, "test"), Error);
  EXPECT_THROW(detail::unpack_fp16_lossless({}, out, 16, "test"), Error);
  // Method 2 (the default form): a plane of the wrong width is refused, not reinterpreted, and
  // a version-2 file may not use it.
  ASSERT_EQ(best[0], 2);
  EXPECT_THROW(detail::unpack_fp16_lossless(best, out, 8, "test"), Error);
  EXPECT_THROW(detail::unpack_fp16_lossless(best, out, 16, "test", 2), Error);  // version 2
}

// Values [rows, 16] with rows `repeat_from`.. repeating earlier rows (row r = row r % period).
std::vector<Half> with_repeats(size_t rows, size_t period, uint32_t seed) {
  KVCacheConfig cfg;
  const test::Filled f = filled_cache(rows, cfg, seed);
  std::vector<Half> v(f.kv.begin(), f.kv.begin() + static_cast<ptrdiff_t>(rows * 16));
  for (size_t r = period; r < rows; ++r) {
    std::memcpy(v.data() + r * 16, v.data() + (r % period) * 16, 16 * sizeof(Half));
  }
  return v;
}

// Values [rows, 16] (2 heads x 8) whose rows from `period` on are row r - period rotated by
// `period` positions as RoPE rotates keys (adjacent pairs, base 10^4), rounded to fp16.
std::vector<Half> with_rotations(size_t rows, size_t period, uint32_t seed) {
  std::vector<Half> v = with_repeats(rows, rows, seed);
  for (size_t r = period; r < rows; ++r) {
    for (size_t i = 0; i < 16; i += 2) {
      const double theta = std::pow(1e4, -2.0 * static_cast<double>((i % 8) / 2) / 8.0) *
                           static_cast<double>(period);
      const double x0 = half_to_float(v[(r - period) * 16 + i]);
      const double x1 = half_to_float(v[(r - period) * 16 + i + 1]);
      v[r * 16 + i] =
          float_to_half(static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta)));
      v[r * 16 + i + 1] =
          float_to_half(static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta)));
    }
  }
  return v;
}

ErrorCode unpack_code(std::span<const uint8_t> packed, std::span<Half> out) {
  try {
    detail::unpack_fp16_lossless(packed, out, 16, "test");
    return ErrorCode::ok;
  } catch (const Error& e) {
    return e.code();
  }
}

TEST(Container, LosslessRepeatedRowsRoundTripAndShrink) {
  for (const size_t period : {1, 3, 7, 64, 200}) {
    const std::vector<Half> v = with_repeats(200, period, 4);
    const std::vector<uint8_t> packed = detail::pack_fp16_lossless(v, 16, 0);
    ASSERT_EQ(packed[0], 2);
    std::vector<Half> out(v.size());
    detail::unpack_fp16_lossless(packed, out, 16, "test");
    EXPECT_EQ(0, std::memcmp(out.data(), v.data(), v.size() * 2)) << period;
    // A repeated row costs its bitmap bit and a 1-byte source; a distinct one ~16 bytes.
    if (period < 200) {
      EXPECT_LT(packed.size(), 32 * period + 2 * 200 + 256) << period;
    }
  }
  // The repeats given (first_equal_rows, as the writer hands a layer's V rows over) or found
  // again: the same bytes.
  for (const size_t period : {1, 7, 200}) {
    const std::vector<Half> v = with_repeats(200, period, 5);
    const std::vector<uint32_t> equal = detail::first_equal_rows(v, 16);
    EXPECT_EQ(detail::pack_fp16_lossless(v, 16, 0, 8, {}, equal),
              detail::pack_fp16_lossless(v, 16, 0))
        << period;
  }
  // Low bytes far from uniform: the low plane is rANS-coded, and still exact.
  std::vector<Half> low = with_repeats(300, 300, 8);
  for (Half& h : low) h.bits &= 0xff03;
  const std::vector<uint8_t> packed = detail::pack_fp16_lossless(low, 16, 0);
  std::vector<Half> out(low.size());
  detail::unpack_fp16_lossless(packed, out, 16, "test");
  EXPECT_EQ(0, std::memcmp(out.data(), low.data(), low.size() * 2));
  EXPECT_LT(packed.size(), low.size() * 3 / 2);
}

// More values than the low bytes' entropy sample (4,096): a sample near the threshold (246
// equally likely low bytes, 7.94 bits; its estimate 7.90 before the bias correction, which
// brings it back to 7.94) counts every row, whose low bytes are skewed after it, so that the low
// plane is coded as a stream.
TEST(Container, LosslessLowBytesCountedPastTheirSample) {
  const size_t rows = 512, width = 128;
  std::mt19937 rng(3);
  std::vector<Half> v(rows * width);
  for (size_t i = 0; i < v.size(); ++i) {
    const unsigned low = i < 128 * width ? rng() % 246 : rng() % 4;
    v[i] = Half{static_cast<uint16_t>(0x3c00 | low)};
  }
  const std::vector<uint8_t> packed = detail::pack_fp16_lossless(v, width, 0);
  std::vector<Half> out(v.size());
  detail::unpack_fp16_lossless(packed, out, width, "test");
  EXPECT_EQ(0, std::memcmp(out.data(), v.data(), v.size() * 2));
  EXPECT_LT(packed.size(), 50000u);  // raw low bytes alone: 65536
}

// Channels of different scales (random walks, as in the bench's synthetic set) among i.i.d.
// ones. All of them: a high-byte table per channel, estimated well ahead of one pooled table, is
// the only form coded, from the writer's byte counts permuted to each channel's symbols. Half:
// the estimate comes near the pooled table's, both forms are coded, and the per-channel one,
// smaller here, is kept. A quarter: the pooled table. The values come back exactly each time.
TEST(Container, LosslessPerChannelHighBytesRoundTrip) {
  const size_t rows = 1024, width = 64;
  const struct {
    size_t walks;  // channels 0..walks-1 random walks of their own scale, the rest N(0, 1)
    uint8_t form;  // the high plane's form: 2 row differences, 1 per channel, 0 pooled
  } cases[] = {{width, 2}, {width / 2, 1}, {width / 4, 0}};  // 2: 99,746 bytes, 1: 101,609
  for (const auto& k : cases) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<Half> v(rows * width);
    for (size_t c = 0; c < width; ++c) {
      const float amp = 0.01f + static_cast<float>(c % 7) * 3.0f;
      float walk = 0;
      for (size_t r = 0; r < rows; ++r) {
        walk += 0.1f * nd(rng);
        v[r * width + c] = float_to_half(c < k.walks ? amp * (walk + 0.3f * nd(rng)) : nd(rng));
      }
    }
    const std::vector<uint8_t> packed = detail::pack_fp16_lossless(v, width, 0);
    // Method 2, no rotated rows, no repeated rows, the low plane's form, the high plane's form.
    ASSERT_GT(packed.size(), 5u);
    ASSERT_EQ(packed[0], 2);
    ASSERT_EQ(packed[1], 0);
    ASSERT_EQ(packed[2], 0);
    EXPECT_EQ(packed[4], k.form) << k.walks << " walks";
    std::vector<Half> out(v.size());
    detail::unpack_fp16_lossless(packed, out, width, "test");
    EXPECT_EQ(0, std::memcmp(out.data(), v.data(), v.size() * 2)) << k.walks << " walks";
  }
}

TEST(Container, LosslessRotatedRowsRoundTripAndShrink) {
  const size_t rows = 120, period = 40;
  const std::vector<Half> v = with_rotations(rows, period, 12);
  std::vector<uint32_t> hint(rows, UINT32_MAX);
  for (size_t r = period; r < rows; ++r) hint[r] = static_cast<uint32_t>(r - period);
  const std::vector<uint8_t> plain = detail::pack_fp16_lossless(v, 16, 0);
  const std::vector<uint8_t> rotated = detail::pack_fp16_lossless(v, 16, 0, 8, hint);
  ASSERT_EQ(rotated[0], 2);
  EXPECT_EQ(rotated[1], 1);  // adjacent pairs
  // 80 of 120 rows predicted to within a few units in the last place: far fewer bytes.
  EXPECT_LT(rotated.size(), plain.size() * 6 / 10);
  std::vector<Half> out(v.size());
  detail::unpack_fp16_lossless(rotated, out, 16, "test");
  EXPECT_EQ(0, std::memcmp(out.data(), v.data(), v.size() * 2));
  // A row equal to a rotated row (first_equal_rows names it, but it is not a distinct row):
  // given repeats are not used beside rotated rows.
  std::vector<Half> mixed = v;
  std::memcpy(mixed.data() + 119 * 16, mixed.data() + 50 * 16, 16 * sizeof(Half));
  const std::vector<uint8_t> found = detail::pack_fp16_lossless(mixed, 16, 0, 8, hint);
  EXPECT_EQ(detail::pack_fp16_lossless(mixed, 16, 0, 8, hint, detail::first_equal_rows(mixed, 16)),
            found);
  detail::unpack_fp16_lossless(found, out, 16, "test");
  EXPECT_EQ(0, std::memcmp(out.data(), mixed.data(), mixed.size() * 2));
  // A wrong head_dim (no divisor of the width) or hints past the row count: no rotation.
  EXPECT_EQ(detail::pack_fp16_lossless(v, 16, 0, 5, hint)[1], 0);
  EXPECT_EQ(detail::pack_fp16_lossless(v, 16, 0, 8, std::span(hint).first(7)), plain);
  const auto edited = [&](size_t at, uint8_t value) {
    std::vector<uint8_t> b = rotated;
    b[at] = value;
    return unpack_code(b, out);
  };
  EXPECT_EQ(edited(2, 7), ErrorCode::corrupt_input);       // odd head_dim
  EXPECT_EQ(edited(2, 32), ErrorCode::corrupt_input);      // head_dim above the width
  EXPECT_EQ(edited(10, 0x7f), ErrorCode::corrupt_input);   // the first cosine made NaN
  EXPECT_EQ(edited(10, 0x40), ErrorCode::corrupt_input);   // the first cosine made > 1
  EXPECT_EQ(edited(3 + 64, 0), ErrorCode::corrupt_input);  // rotated row count 0
  for (size_t n = 0; n < rotated.size(); ++n) {
    EXPECT_NE(unpack_code(std::span(rotated).first(n), out), ErrorCode::ok) << n;
  }
  for (size_t i = 1; i < rotated.size(); ++i) {
    std::vector<uint8_t> b = rotated;
    b[i] ^= 0x41;
    (void)unpack_code(b, out);
  }
}

// Rotated rows a few of whose values are far from the rotation (residuals of 255 and more, coded
// as escapes) next to rows without any: both of the decoder's row paths, exact.
TEST(Container, LosslessRotatedRowsWithEscapesRoundTrip) {
  const size_t rows = 120, period = 40;
  std::vector<Half> v = with_rotations(rows, period, 12);
  for (size_t r = period; r < rows; r += 3) v[r * 16 + r % 16].bits ^= 0x2400;
  std::vector<uint32_t> hint(rows, UINT32_MAX);
  for (size_t r = period; r < rows; ++r) hint[r] = static_cast<uint32_t>(r - period);
  const std::vector<uint8_t> packed = detail::pack_fp16_lossless(v, 16, 0, 8, hint);
  ASSERT_EQ(packed[0], 2);
  EXPECT_EQ(packed[1], 1);  // still coded as rotations
  std::vector<Half> out(v.size());
  detail::unpack_fp16_lossless(packed, out, 16, "test");
  EXPECT_EQ(0, std::memcmp(out.data(), v.data(), v.size() * 2));
}

// The writer predicts rotated rows with the reader's rotation: its bytes and the decoded values
// are the same on every SIMD path (the kernels under them: lossless_kernels_test.cpp).
TEST(Container, LosslessRotatedRowsAlikeOnEveryPath) {
  const size_t rows = 120, period = 40;
  const std::vector<Half> v = with_rotations(rows, period, 5);
  std::vector<uint32_t> hint(rows, UINT32_MAX);
  for (size_t r = period; r < rows; ++r) hint[r] = static_cast<uint32_t>(r - period);
  set_simd_path(SimdPath::scalar);
  const std::vector<uint8_t> want = detail::pack_fp16_lossless(v, 16, 0, 8, hint);
  ASSERT_EQ(want[1], 1);  // rotated rows, adjacent pairs
  for (const SimdPath p : {SimdPath::scalar, SimdPath::avx2, SimdPath::avx512}) {
    set_simd_path(p);
    EXPECT_EQ(detail::pack_fp16_lossless(v, 16, 0, 8, hint), want) << simd_path_name(p);
    std::vector<Half> out(v.size());
    detail::unpack_fp16_lossless(want, out, 16, "test");
    EXPECT_EQ(0, std::memcmp(out.data(), v.data(), v.size() * 2)) << simd_path_name(p);
  }
  set_simd_path(best_supported_simd_path());
}

TEST(Container, LosslessPairsDecodeAsTwoSingleTensors) {
  // A layer's K and V as the reader decodes them (unpack_fp16_lossless_pair: high byte planes
  // in lockstep): K with repeated rows, V with an extra scale (other tables), both with over
  // 16 K distinct values (32-lane payloads); then damage in either tensor fails with the
  // message of unpack_fp16_lossless on K, then V.
  constexpr uint16_t kV = detail::kCgkvVersion;
  const size_t rows = 1100, width = 16;
  std::vector<Half> k = with_repeats(rows, 1050, 21), v = with_repeats(rows, rows, 22);
  for (Half& h : v) h = float_to_half(half_to_float(h) * 7.0f);
  const std::vector<uint8_t> pk = detail::pack_fp16_lossless(k, width, 0);
  const std::vector<uint8_t> pv = detail::pack_fp16_lossless(v, width, 0);
  ASSERT_EQ(pk[0], 2);
  ASSERT_EQ(pv[0], 2);
  const std::string ck = "K", cv = "V";
  std::vector<Half> ok(k.size()), ov(v.size());
  detail::unpack_fp16_lossless_pair({pk, ok, &ck}, {pv, ov, &cv}, width, kV);
  EXPECT_EQ(0, std::memcmp(ok.data(), k.data(), k.size() * 2));
  EXPECT_EQ(0, std::memcmp(ov.data(), v.data(), v.size() * 2));
  auto outcome = [&](auto&& decode) {
    try {
      decode();
      return std::string("ok");
    } catch (const Error& e) {
      return std::string(error_code_name(e.code())) + " " + e.what();
    }
  };
  for (int victim = 0; victim < 2; ++victim) {
    const std::vector<uint8_t>& good = victim ? pv : pk;
    for (size_t i = 1; i < good.size(); i += 97) {
      std::vector<uint8_t> bk = pk, bv = pv;
      (victim ? bv : bk)[i] ^= 0x21;
      const std::string want = outcome([&] {
        detail::unpack_fp16_lossless(bk, ok, width, ck);
        detail::unpack_fp16_lossless(bv, ov, width, cv);
      });
      const std::string got = outcome([&] {
        detail::unpack_fp16_lossless_pair({bk, ok, &ck}, {bv, ov, &cv}, width, kV);
      });
      ASSERT_EQ(got, want) << (victim ? "V" : "K") << " byte " << i;
    }
  }
  // The pair decoder's storage is kept per thread and carries nothing from one pair to the
  // next: after the failures above, a smaller pair and then the first one decode exactly.
  const std::vector<Half> k2 = with_repeats(300, 280, 23), v2 = with_repeats(300, 300, 24);
  const std::vector<uint8_t> pk2 = detail::pack_fp16_lossless(k2, width, 0);
  const std::vector<uint8_t> pv2 = detail::pack_fp16_lossless(v2, width, 0);
  std::vector<Half> ok2(k2.size()), ov2(v2.size());
  detail::unpack_fp16_lossless_pair({pk2, ok2, &ck}, {pv2, ov2, &cv}, width, kV);
  EXPECT_EQ(0, std::memcmp(ok2.data(), k2.data(), k2.size() * 2));
  EXPECT_EQ(0, std::memcmp(ov2.data(), v2.data(), v2.size() * 2));
  std::fill(ok.begin(), ok.end(), Half{});
  std::fill(ov.begin(), ov.end(), Half{});
  detail::unpack_fp16_lossless_pair({pk, ok, &ck}, {pv, ov, &cv}, width, kV);
  EXPECT_EQ(0, std::memcmp(ok.data(), k.data(), k.size() * 2));
  EXPECT_EQ(0, std::memcmp(ov.data(), v.data(), v.size() * 2));
}

// Channels that drift slowly, each at an amplitude of its own (the bench's synthetic set).
std::vector<Half> drifting(size_t rows, size_t width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01;
  std::vector<Half> v(rows * width);
  for (size_t c = 0; c < width; ++c) {
    float walk = 0;
    const float amp = 0.1f + static_cast<float>(c % 7);
    for (size_t r = 0; r < rows; ++r) {
      walk += 0.1f * n01(rng);
      v[r * width + c] = float_to_half(amp * (walk + 0.05f * n01(rng)));
    }
  }
  return v;
}

TEST(Container, LosslessHighBytesOfDriftingChannelsAsRowDifferences) {
  // Their high bytes go in one table over each symbol's difference from the row above (high
  // form 2, file version 7): decoded exactly alone and in a pair with a tensor of the pooled
  // form; refused in a file of version 6; every damaged byte decodes or fails with an Error.
  const size_t rows = 700, width = 32;
  const std::vector<Half> a = drifting(rows, width, 5);
  const std::vector<uint8_t> packed = detail::pack_fp16_lossless(a, width, 0);
  ASSERT_EQ(packed[0], 2);  // method 2
  ASSERT_EQ(packed[1], 0);  // no rotated rows
  ASSERT_EQ(packed[2], 0);  // no repeated rows
  EXPECT_EQ(packed[4], 2);  // after the low form: the high form
  std::vector<Half> out(a.size());
  detail::unpack_fp16_lossless(packed, out, width, "test");
  EXPECT_EQ(0, std::memcmp(out.data(), a.data(), a.size() * 2));
  try {
    detail::unpack_fp16_lossless(packed, out, width, "test", 6);
    ADD_FAILURE() << "high form 2 read in a version-6 file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_input);
    EXPECT_NE(std::string(e.what()).find("version 7"), std::string::npos) << e.what();
  }
  std::vector<Half> b(rows * width);  // independent values: one pooled table
  std::mt19937 rng(6);
  std::normal_distribution<float> n01;
  for (Half& h : b) h = float_to_half(n01(rng));
  const std::vector<uint8_t> packed_b = detail::pack_fp16_lossless(b, width, 0);
  ASSERT_EQ(packed_b[4], 0);
  std::vector<Half> out_b(b.size());
  std::fill(out.begin(), out.end(), Half{});
  const std::string ca = "A", cb = "B";
  for (int order = 0; order < 2; ++order) {
    const detail::LosslessTensor ta{packed, out, &ca}, tb{packed_b, out_b, &cb};
    detail::unpack_fp16_lossless_pair(order ? tb : ta, order ? ta : tb, width,
                                      detail::kCgkvVersion);
    EXPECT_EQ(0, std::memcmp(out.data(), a.data(), a.size() * 2)) << order;
    EXPECT_EQ(0, std::memcmp(out_b.data(), b.data(), b.size() * 2)) << order;
  }
  for (size_t i = 1; i < packed.size(); i += 7) {
    std::vector<uint8_t> bad = packed;
    bad[i] ^= 0x41;
    (void)unpack_code(bad, out);
  }
  // A plane of more than one group (65,536 symbols a group, the last one padded), with rows
  // repeated (the differences are between distinct rows).
  std::vector<Half> c = drifting(2200, width, 7);
  for (size_t r = 1000; r < 1100; ++r)
    std::memcpy(c.data() + r * width, c.data() + (r - 500) * width, width * sizeof(Half));
  const std::vector<uint8_t> packed_c = detail::pack_fp16_lossless(c, width, 0);
  ASSERT_EQ(packed_c[0], 2);
  std::vector<Half> out_c(c.size());
  detail::unpack_fp16_lossless(packed_c, out_c, width, "test");
  EXPECT_EQ(0, std::memcmp(out_c.data(), c.data(), c.size() * 2));
  // Its high form: after the repeated rows' count, bitmap and 100 sources (one or two bytes).
  size_t at = 2;
  EXPECT_EQ(packed_c[at], 100);
  at += 1 + (2200 + 7) / 8;
  for (int k = 0; k < 100; ++k) at += (packed_c[at] & 0x80) ? 2 : 1;
  EXPECT_EQ(packed_c[at + 1], 2);  // the low form, then the high form
}

TEST(Container, LayersOfAChunkDecodedTogetherReportTheFirstError) {
  // One chunk of four layers (its layers decoded on the pool's threads), lossless and 3-bit,
  // whose layer 1 V and layer 3 K start with a wrong byte (an unknown lossless method, a broken
  // batch magic), the chunk's checksum made right again: the read fails with layer 1's error,
  // as a read of one tensor after another would, on any number of threads.
  const size_t L = 4, T = 200, H = 2, D = 8;
  const std::vector<Half> kv = kv_array(L, T, H, D);
  const size_t shape[5] = {L, 2, T, H, D};
  const ModelShape model = kv_array_model_shape(shape, ErrorCode::invalid_argument, "kv");
  for (const bool lossless : {true, false}) {
    SCOPED_TRACE(lossless ? "lossless" : "3 bits");
    KVEncodeOptions o;
    o.lossless = lossless;
    o.bits = 3;
    o.chunk_tokens = lossless ? 1024 : 256;
    std::vector<uint8_t> file = encode_kv_array(array_view(kv, L, T, H, D), model, o);
    CgkvInfo info = CgkvReader::from_bytes(file).info();
    ASSERT_EQ(info.chunks.size(), 1u);
    const CgkvRange& range = info.chunks[0].range;
    // The chunk's parts: each tensor's size as a varint, then its bytes.
    size_t at = range.offset;
    for (size_t t = 0; t < 2 * L; ++t) {
      uint64_t size = 0;
      for (int shift = 0;; shift += 7) {
        const uint8_t b = file[at++];
        size |= uint64_t{b & 0x7fu} << shift;
        if (!(b & 0x80)) break;
      }
      if (t == 3 || t == 6) file[at] = 7;
      at += size;
    }
    ASSERT_EQ(at, range.offset + range.bytes);
    info.chunks[0].range.xxh64 =
        detail::chunk_checksum(info.version, 0, info.chunks[0],
                               std::span<const uint8_t>(file).subspan(range.offset, range.bytes));
    const std::vector<uint8_t> header = detail::serialize_header(info);
    std::copy(header.begin(), header.end(), file.begin());
    const CgkvReader r = CgkvReader::from_bytes(file);
    for (const size_t threads : {1, 2, 4}) {
      set_thread_count(threads);
      try {
        r.read_tokens(0, T);
        ADD_FAILURE() << "damaged tensors decoded on " << threads << " threads";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::corrupt_input);
        EXPECT_NE(std::string(e.what()).find("layer 1 V"), std::string::npos)
            << threads << " threads: " << e.what();
      }
    }
    set_thread_count(0);
  }
}

TEST(Container, LosslessMethod2HostileBytesAreRejected) {
  const std::vector<Half> v = with_repeats(42, 15, 6);
  const std::vector<uint8_t> good = detail::pack_fp16_lossless(v, 16, 0);
  ASSERT_EQ(good[0], 2);
  ASSERT_EQ(good[1], 0);   // no rotated rows
  ASSERT_EQ(good[2], 27);  // repeated rows; the bitmap (6 bytes) follows
  std::vector<Half> out(v.size());
  const auto edited = [&](size_t at, uint8_t value) {
    std::vector<uint8_t> b = good;
    b[at] = value;
    return unpack_code(b, out);
  };
  EXPECT_EQ(edited(1, 3), ErrorCode::corrupt_input);               // rotation kind
  EXPECT_EQ(edited(2, 42), ErrorCode::corrupt_input);              // count not below the rows
  EXPECT_EQ(edited(2, 26), ErrorCode::corrupt_input);              // count below the bitmap's
  EXPECT_EQ(edited(3, good[3] | 1), ErrorCode::corrupt_input);     // row 0 repeated
  EXPECT_EQ(edited(8, good[8] | 0x80), ErrorCode::corrupt_input);  // padding bit past row 41
  EXPECT_EQ(edited(9, 15), ErrorCode::corrupt_input);              // source not yet seen
  // After 27 one-byte sources: low form, high form, 16 anchors.
  const size_t forms = 9 + 27;
  EXPECT_EQ(edited(forms, 2), ErrorCode::corrupt_input);
  EXPECT_EQ(edited(forms + 1, 3), ErrorCode::corrupt_input);
  EXPECT_EQ(edited(forms + 2, 0x80), ErrorCode::corrupt_input);
  {
    std::vector<uint8_t> b = good;
    b.pop_back();  // the raw low plane one byte short
    EXPECT_EQ(unpack_code(b, out), ErrorCode::corrupt_input);
    b = good;
    b.push_back(0);
    EXPECT_EQ(unpack_code(b, out), ErrorCode::corrupt_input);
  }
  // Every truncation and every single-byte change either decodes or fails with an Error
  // (sanitizer builds check that nothing reads out of bounds).
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_NE(unpack_code(std::span(good).first(n), out), ErrorCode::ok) << n;
  }
  for (size_t i = 1; i < good.size(); ++i) {
    for (const uint8_t x : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> b = good;
      b[i] ^= x;
      (void)unpack_code(b, out);
    }
  }
}

TEST(Container, BlobsRoundTripAndUnknownKindsIgnored) {
  KVCacheConfig cfg;
  const test::Filled f = filled_cache(40, cfg);
  std::vector<CgkvBlob> blobs = {
      {static_cast<uint32_t>(BlobKind::token_ids), {1, 0, 0, 0, 2, 0, 0, 0}},
      {static_cast<uint32_t>(BlobKind::metadata_json), {'{', '}'}},
      {999, {}}};
  const CgkvReader r = CgkvReader::from_bytes(write_cgkv(f.cache, blobs));
  EXPECT_EQ(*r.read_blob(1), blobs[0].bytes);
  EXPECT_EQ(*r.read_blob(2), blobs[1].bytes);
  EXPECT_TRUE(r.read_blob(999)->empty());
  EXPECT_FALSE(r.read_blob(3).has_value());
  r.verify();
}

TEST(Container, FileReaderReadsOnlyNeededChunks) {
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  const test::Filled f = filled_cache(256, cfg);
  std::vector<uint8_t> file = write_cgkv(f.cache);
  const CgkvInfo info = CgkvReader::from_bytes(file).info();
  // Damage chunk 3: ranges inside chunks 0-2 still read; a range touching chunk 3 fails.
  file[info.chunks[3].range.offset + 5] ^= 0x40;
  const std::string path = ::testing::TempDir() + "/cachegen_partial.cgkv";
  write_file_atomic(path, file);
  const std::vector<Half> first = CgkvReader::from_bytes(file).read_tokens(0, 192);
  // Read into memory chunk by chunk, or mapped (chunks decoded where they lie): the same.
  for (const bool mapped : {false, true}) {
    const CgkvReader r = mapped ? CgkvReader::map_file(path) : CgkvReader::open_file(path);
    const std::vector<Half> got = r.read_tokens(0, 192);
    ASSERT_EQ(got.size(), 2u * 2 * 192 * 16);
    EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * sizeof(Half)), 0) << mapped;
    try {
      r.read_tokens(150, 200);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::corrupt_input);
      EXPECT_NE(std::string(e.what()).find("chunk 3"), std::string::npos) << e.what();
    }
    EXPECT_THROW(r.verify(), Error);
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace cachegen
