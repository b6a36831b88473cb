// Streamed writers (CgkvWriteAt): the same bytes as the files returned whole, written in file
// order with the header last, argument errors before the first write, the destination's
// errors passed on.
#include <gtest/gtest.h>

#include <random>

#include "cachegen/container.h"
#include "cachegen/encode.h"
#include "cachegen/error.h"
#include "cachegen/runtime.h"
#include "container/container_test_util.h"

namespace cachegen {
namespace {

// Every call a writer makes, and the file they add up to.
struct Recorded {
  std::vector<std::pair<uint64_t, uint64_t>> calls;  // offset, size
  std::vector<uint8_t> file;
  CgkvWriteAt out() {
    return [this](uint64_t offset, std::span<const uint8_t> bytes) {
      calls.emplace_back(offset, bytes.size());
      if (file.size() < offset + bytes.size()) file.resize(offset + bytes.size());
      std::copy(bytes.begin(), bytes.end(), file.begin() + static_cast<ptrdiff_t>(offset));
    };
  }
};

// The calls cover the file once: after the header's place in increasing order without gaps or
// overlaps, then the header at 0.
void expect_file_order(const Recorded& r, uint64_t size) {
  ASSERT_GE(r.calls.size(), 2u);
  const auto [header_at, header_bytes] = r.calls.back();
  EXPECT_EQ(header_at, 0u);
  EXPECT_EQ(header_bytes, CgkvReader::from_bytes(r.file).info().header_bytes);
  uint64_t at = header_bytes;
  for (size_t i = 0; i + 1 < r.calls.size(); ++i) {
    EXPECT_EQ(r.calls[i].first, at) << "call " << i;
    at = r.calls[i].first + r.calls[i].second;
  }
  EXPECT_EQ(at, size);
  EXPECT_EQ(r.file.size(), size);
}

std::vector<Half> random_halves(size_t n, uint32_t seed) {
  std::vector<Half> kv(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (Half& h : kv) h = float_to_half(nd(rng));
  return kv;
}

TEST(StreamedWrite, QuantizedFileEqualsTheWholeOne) {
  // A tail block, a blob, and (8 bits over 50,000 tokens) a file of several buffers.
  std::vector<int32_t> ids(300);
  for (size_t t = 0; t < ids.size(); ++t) ids[t] = static_cast<int32_t>(t % 512);
  const std::vector<CgkvBlob> blobs{token_ids_blob(ids)};
  for (const auto& [T, bits] : {std::pair<size_t, int>{300, 4}, {50000, 8}}) {
    KVCacheConfig cfg;
    cfg.block_tokens = T > 1000 ? 4096 : 64;
    cfg.base_bits = bits;
    const test::Filled f = test::filled_cache(T, cfg);
    const std::vector<uint8_t> whole = write_cgkv(f.cache, blobs);
    Recorded r;
    const uint64_t size = write_cgkv(r.out(), f.cache, blobs);
    EXPECT_EQ(size, whole.size());
    expect_file_order(r, size);
    EXPECT_TRUE(r.file == whole) << T << " tokens";
    if (T > 1000) {
      EXPECT_GT(r.calls.size(), 2u);  // the buffer was flushed before the end
    }
  }
}

TEST(StreamedWrite, LosslessFileEqualsTheWholeOneOnAnyThreads) {
  // Three attention layers (six tensors a chunk: waves end inside chunks); 40,000 random
  // tokens in chunks of 16,384 (tensors under the buffer's size) and of 40,000 (over it:
  // written straight out).
  ModelShape shape = test::small_shape();
  shape.attention = {true, true, true};
  const size_t T = 40000;
  const std::vector<Half> kv = random_halves(3 * 2 * T * 16, 5);
  const std::vector<CgkvBlob> blobs{{static_cast<uint32_t>(BlobKind::metadata_json), {'{', '}'}}};
  for (const size_t chunk : {size_t{16384}, T}) {
    const std::vector<uint8_t> whole = write_cgkv_lossless(shape, kv, T, chunk, blobs);
    for (const size_t threads : {1, 2, 3}) {
      set_thread_count(threads);
      Recorded r;
      const uint64_t size = write_cgkv_lossless(r.out(), shape, kv, T, chunk, blobs);
      EXPECT_EQ(size, whole.size());
      expect_file_order(r, size);
      EXPECT_TRUE(r.file == whole) << chunk << " tokens a chunk, " << threads << " threads";
    }
    set_thread_count(0);
  }
}

TEST(StreamedWrite, EncodeKvArrayStreamsWhatItReturns) {
  // Three layers: on 3 threads a streamed quantized file is coded a chunk at a time, on 2 two
  // chunks at a time (the layers do not split evenly), and each window's chunks are framed
  // beside the next window's coding; 16 chunks of 64 tokens, the last one short, and a blob.
  ModelShape shape = test::small_shape();
  shape.attention = {true, true, true};
  const size_t T = 1000;
  const std::vector<Half> kv = random_halves(3 * 2 * T * 16, 9);
  KVArrayView view;
  view.dtype = KVDType::f16;
  view.n_tokens = T;
  view.n_kv_heads = 2;
  view.head_dim = 8;
  for (size_t l = 0; l < 3; ++l) view.layers.push_back(kv.data() + l * 2 * T * 16);
  std::vector<int32_t> ids(T);
  for (size_t t = 0; t < T; ++t) ids[t] = static_cast<int32_t>(t * 3 % 512);
  const std::vector<CgkvBlob> blobs{token_ids_blob(ids)};
  KVEncodeOptions lossless, three_bits, high;
  lossless.lossless = true;
  three_bits.bits = 3;
  high.level = "high";
  high.rope_base = 10000;
  for (KVEncodeOptions* o : {&lossless, &three_bits, &high}) {
    for (const size_t chunk : {size_t{0}, size_t{64}}) {  // the default (256) and 64
      o->chunk_tokens = chunk;
      set_thread_count(1);
      const std::vector<uint8_t> whole = encode_kv_array(view, shape, *o, blobs);
      for (const size_t threads : {1, 2, 3}) {
        set_thread_count(threads);
        Recorded r;
        EXPECT_EQ(encode_kv_array(r.out(), view, shape, *o, blobs), whole.size());
        expect_file_order(r, whole.size());
        EXPECT_TRUE(r.file == whole)
            << o->level << " " << o->bits << ", chunks " << chunk << ", threads " << threads;
      }
    }
  }
  set_thread_count(0);
}

TEST(StreamedWrite, ArgumentErrorsComeBeforeAnyWrite) {
  Recorded r;
  ModelShape shape = test::small_shape();
  shape.attention = {true, true, true};
  const std::vector<Half> kv = random_halves(3 * 2 * 100 * 16, 1);
  EXPECT_THROW(write_cgkv_lossless(r.out(), shape, kv, 100, 0), Error);  // chunk_tokens
  EXPECT_THROW(write_cgkv_lossless(r.out(), shape, kv, 99, 64), Error);  // kv's size
  KVCacheConfig cfg;
  cfg.layer_bits = {0, 0};  // every layer recomputed and no token ids: refused
  EXPECT_THROW(write_cgkv(r.out(), test::filled_cache(100, cfg).cache), Error);
  KVArrayView view;
  view.dtype = KVDType::f16;
  view.n_tokens = 100;
  view.n_kv_heads = 2;
  view.head_dim = 8;
  for (size_t l = 0; l < 3; ++l) view.layers.push_back(kv.data() + l * 2 * 100 * 16);
  KVEncodeOptions o;
  o.bits = 9;
  EXPECT_THROW(encode_kv_array(r.out(), view, shape, o), Error);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_THROW(write_cgkv(CgkvWriteAt{}, test::filled_cache(100, KVCacheConfig{}).cache), Error);
}

TEST(StreamedWrite, TheDestinationsErrorReachesTheCaller) {
  // A disk that fills up after the first write.
  int calls = 0;
  const CgkvWriteAt full = [&calls](uint64_t, std::span<const uint8_t>) {
    if (++calls > 1) throw Error(ErrorCode::io_error, "no space left on device");
  };
  const std::vector<Half> kv = random_halves(2 * 2 * 40000 * 16, 2);
  try {
    write_cgkv_lossless(full, test::small_shape(), kv, 40000, 40000);
    ADD_FAILURE() << "the destination's error was lost";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error);
  }
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace cachegen
