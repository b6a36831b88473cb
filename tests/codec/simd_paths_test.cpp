// Every SIMD path decodes every stream to the same symbols as the scalar reference; encoding
// is path-independent. The matrix covers encode path x decode path.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "cachegen/runtime.h"
#include "codec_test_inputs.h"

namespace cachegen {
namespace {

std::vector<SimdPath> paths() {
  return test::supported_simd_paths();
}

TEST(CodecSimd, EncodeByDecodePathMatrix) {
  struct Shape {
    size_t rows, dim;
    int bits;
  };
  const Shape shapes[] = {{4096, 8, 3},
                          {1024, 128, 4},
                          {777, 100, 8},
                          {2000, 33, 1},
                          {600, 64, 2},
                          {1024, 32, 2},
                          {1500, 24, 4},
                          // 8-lane payloads (4 K..16 K elements): the narrow kernels, every
                          // search alphabet, periods 1, 15 and 33, and a slot-table alphabet.
                          {1024, 8, 3},
                          {100, 60, 4},
                          {500, 24, 2},
                          {300, 33, 1},
                          {1000, 10, 5},
                          // 4-lane payloads (512..4095 elements) of slot-table alphabets:
                          // periods 1, 3 and 7.
                          {2000, 1, 8},
                          {300, 6, 6},
                          {129, 7, 5},
                          // 4-lane payloads of every search alphabet (the 8-lane step with
                          // half its lanes idle): periods 1, 2, 3, 5 and 33.
                          {256, 8, 3},
                          {70, 10, 1},
                          {100, 12, 4},
                          {150, 20, 2},
                          {60, 33, 3},
                          {4095, 1, 2}};
  for (const auto& sh : shapes) {
    const auto x = test::random_walk(sh.rows, sh.dim, 0.15f, static_cast<uint32_t>(sh.dim));
    const CodeStream q = quantize_to_codes(x, sh.rows, sh.dim, sh.bits, 32);
    std::vector<uint8_t> reference;
    for (SimdPath enc : paths()) {
      set_simd_path(enc);
      const auto bytes = encode(q);
      if (reference.empty()) reference = bytes;
      EXPECT_EQ(bytes, reference) << "encode path " << simd_path_name(enc);
      for (SimdPath dec : paths()) {
        set_simd_path(dec);
        SCOPED_TRACE(std::string(simd_path_name(enc)) + " -> " + simd_path_name(dec));
        test::expect_same_stream(decode(bytes), q);
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

TEST(CodecSimd, SharedBatchEncodeByDecodePathMatrix) {
  // Every search-kernel alphabet (bits 1..4) and a slot-table one, 32-lane slices.
  for (int bits : {1, 2, 3, 4, 5}) {
    for (size_t dim : {size_t{8}, size_t{100}}) {
      const size_t heads = 6, rows = 1024;
      const auto x = test::random_walk(heads * rows, dim, 0.15f, static_cast<uint32_t>(bits));
      const auto streams = quantize_to_codes_batch(x, heads, rows, dim, bits, 32);
      std::vector<uint8_t> reference;
      std::vector<Half> reference_half;
      for (SimdPath enc : paths()) {
        set_simd_path(enc);
        const auto bytes = encode_batch(streams);
        if (reference.empty()) reference = bytes;
        EXPECT_EQ(bytes, reference) << "encode path " << simd_path_name(enc);
        for (SimdPath dec : paths()) {
          set_simd_path(dec);
          SCOPED_TRACE(std::string(simd_path_name(enc)) + " -> " + simd_path_name(dec) + " bits " +
                       std::to_string(bits) + " dim " + std::to_string(dim));
          const auto back = decode_batch(bytes);
          for (size_t h = 0; h < heads; ++h) test::expect_same_stream(back[h], streams[h]);
          const auto half = decode_batch_to_half(bytes);
          if (reference_half.empty()) reference_half = half;
          ASSERT_EQ(half.size(), reference_half.size());
          for (size_t i = 0; i < half.size(); ++i) ASSERT_EQ(half[i].bits, reference_half[i].bits);
        }
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

TEST(CodecSimd, SlicePairsAndThreadCountsDecodeAlike) {
  // 7 heads of 4096 elements in slices of 4 heads + a shorter last slice (decoded as a pair
  // with a slice of a different length); 12 and 10 slices of one head, which two and three
  // threads split into runs of equal length (quads, then a pair or a single slice); 40 heads as
  // 8 slices of 5 (two quads: slice_heads in batch_shared.cpp); 1, 2 and 3 threads, every path;
  // then damage inside each slice's payload (and another slice's) must fail with the same error
  // everywhere (the first failing slice's, as a sequential decode reports it).
  struct Shape {
    size_t heads, rows, dim;
  };
  for (const Shape& sh :
       {Shape{7, 512, 8}, Shape{12, 256, 64}, Shape{10, 512, 32}, Shape{40, 512, 8}}) {
    SCOPED_TRACE(std::to_string(sh.heads) + " heads of " + std::to_string(sh.rows) + " x " +
                 std::to_string(sh.dim));
    const auto x = test::random_walk(sh.heads * sh.rows, sh.dim, 0.15f, 77);
    const auto streams = quantize_to_codes_batch(x, sh.heads, sh.rows, sh.dim, 3, 32);
    const auto bytes = encode_batch(streams);
    for (size_t threads : {size_t{1}, size_t{2}, size_t{3}}) {
      set_thread_count(threads);
      for (SimdPath dec : paths()) {
        set_simd_path(dec);
        SCOPED_TRACE(std::string(simd_path_name(dec)) + " threads " + std::to_string(threads));
        const auto back = decode_batch(bytes);
        for (size_t h = 0; h < sh.heads; ++h) test::expect_same_stream(back[h], streams[h]);
      }
    }
    for (size_t i = bytes.size() / 3; i < bytes.size(); i += bytes.size() / 150) {
      std::vector<uint8_t> bad = bytes;
      bad[i] ^= 0x5a;
      // Every other time a later slice too: two runs fail, and the first one's error counts.
      if (i % 2 == 1) bad[i + (bytes.size() - i) / 2] ^= 0x5a;
      std::vector<std::string> outcomes;
      for (size_t threads : {size_t{1}, size_t{2}, size_t{3}}) {
        set_thread_count(threads);
        for (SimdPath p : paths()) {
          set_simd_path(p);
          try {
            const auto s = decode_batch(bad);
            std::string codes;
            for (const auto& h : s) codes.append(h.codes.begin(), h.codes.end());
            outcomes.push_back("ok " + std::to_string(std::hash<std::string>{}(codes)));
          } catch (const Error& e) {
            outcomes.push_back(e.what());
          }
        }
      }
      for (const auto& o : outcomes) EXPECT_EQ(o, outcomes[0]) << "byte " << i;
    }
  }
  set_thread_count(0);
  set_simd_path(best_supported_simd_path());
}

TEST(CodecSimd, ParallelParameterParseMatchesSequential) {
  // 24 heads of 512 x 8 at 3 bits: 3,072 compact parameter pairs (encode_values_batch's
  // parameters: compact), which two threads decode head by head in parallel. The same
  // streams, and the same first error (code and message) for damage anywhere in the
  // parameter blocks, as one thread's sequential parse.
  const size_t heads = 24, rows = 512, dim = 8;
  const auto x = test::random_walk(heads * rows, dim, 0.15f, 91);
  const auto bytes = encode_values_batch(std::span<const float>(x), heads, rows, dim, 3, 32);
  auto outcome = [&](const std::vector<uint8_t>& b) {
    try {
      const auto s = decode_batch(b);
      std::string all;
      for (const auto& h : s) {
        all.append(h.codes.begin(), h.codes.end());
        all.append(reinterpret_cast<const char*>(h.scale.data()), h.scale.size() * 4);
        all.append(reinterpret_cast<const char*>(h.zero.data()), h.zero.size() * 4);
      }
      return "ok " + std::to_string(std::hash<std::string>{}(all));
    } catch (const Error& e) {
      return std::string(error_code_name(e.code())) + " " + e.what();
    }
  };
  set_thread_count(1);
  const std::string one = outcome(bytes);
  set_thread_count(2);
  EXPECT_EQ(outcome(bytes), one);
  set_thread_count(1);
  for (SimdPath p : paths()) {
    set_simd_path(p);
    EXPECT_EQ(outcome(bytes), one) << simd_path_name(p);
  }
  set_simd_path(best_supported_simd_path());
  // Damage that fails (most damage to compact parameters only changes their values): bytes of
  // the parameter blocks zeroed or set, kept where one thread's parse fails; each such byte,
  // then pairs of them in different heads (blocks are ~1 KB: the first head's error wins).
  auto damaged = [&](std::initializer_list<std::pair<size_t, uint8_t>> edits) {
    std::vector<uint8_t> bad = bytes;
    for (const auto& [at, value] : edits) bad[at] = value;
    return bad;
  };
  std::vector<std::pair<size_t, uint8_t>> failing;
  set_thread_count(1);
  for (size_t i = 8; i < bytes.size() / 2; i += 7) {
    for (uint8_t value : {uint8_t{0x00}, uint8_t{0xff}}) {
      if (outcome(damaged({{i, value}})).rfind("ok", 0) != 0) failing.emplace_back(i, value);
    }
  }
  ASSERT_GE(failing.size(), 20u);
  // (And on every SIMD path: the AVX-512 one reads blocks side by side in lanes, and where
  // any fails, again in pairs for the first error in order.)
  auto same_on_two_threads = [&](std::initializer_list<std::pair<size_t, uint8_t>> edits) {
    const std::vector<uint8_t> bad = damaged(edits);
    set_thread_count(1);
    const std::string want = outcome(bad);
    set_thread_count(2);
    EXPECT_EQ(outcome(bad), want) << "bytes " << edits.begin()->first;
    set_thread_count(1);
    for (SimdPath p : paths()) {
      set_simd_path(p);
      EXPECT_EQ(outcome(bad), want) << "bytes " << edits.begin()->first << " " << simd_path_name(p);
    }
    set_simd_path(best_supported_simd_path());
  };
  for (const auto& f : failing) same_on_two_threads({f});
  size_t pairs = 0;
  for (size_t a = 0; a < failing.size() && pairs < 40; a += 3) {
    for (size_t b = a + 1; b < failing.size(); ++b) {
      if (failing[b].first < failing[a].first + 1500) continue;
      same_on_two_threads({failing[a], failing[b]});
      ++pairs;
      break;
    }
  }
  EXPECT_GE(pairs, 10u);
  set_thread_count(0);
}

TEST(CodecSimd, CorruptStreamsFailTheSameOnEveryPath) {
  // 32-lane, 8-lane and 4-lane payloads (of a slot-table alphabet, and of a search one).
  for (size_t rows : {size_t{4096}, size_t{1024}, size_t{300}, size_t{301}}) {
    const auto x = test::random_walk(rows, 8, 0.15f, 9);
    const auto bytes = encode_values(x, rows, 8, rows == 300 ? 8 : rows == 301 ? 3 : 4);
    for (size_t i = 20; i < bytes.size(); i += 13) {
      std::vector<uint8_t> bad = bytes;
      bad[i] ^= 0x33;
      std::vector<std::string> outcomes;
      for (SimdPath p : paths()) {
        set_simd_path(p);
        try {
          const CodeStream s = decode(bad);
          outcomes.push_back("ok " + std::to_string(s.codes.size()));
        } catch (const Error& e) {
          outcomes.push_back(error_code_name(e.code()));
        }
      }
      for (const auto& o : outcomes) EXPECT_EQ(o, outcomes[0]) << "byte " << i;
    }
  }
  set_simd_path(best_supported_simd_path());
}

TEST(CodecSimd, BatchesDecodedTogetherMatchOneAtATime) {
  // Pairs of batches with their own tables: 8-lane payloads (a short layer's K and V), 32-lane
  // slices, unequal alphabets and lane counts (no lockstep), and independent-layout batches
  // (one head: 8 lanes, or 32 as a file's 128-wide one-head tensors, whose heads are decoded in
  // pairs across batches); every path, one and two threads, against decode_batch_to_rows of
  // each.
  // Cubed values (heavy tails) give other code histograms, hence other tables, than the walk.
  struct Spec {
    size_t heads, rows, dim;
    int bits;
    bool cubed;
  };
  const Spec specs[] = {{4, 256, 8, 3, false},  {4, 256, 8, 3, true},    {4, 256, 8, 2, true},
                        {4, 1024, 8, 3, true},  {2, 300, 24, 4, false},  {2, 300, 24, 4, true},
                        {1, 512, 8, 3, false},  {4, 256, 8, 5, false},   {1, 256, 128, 3, false},
                        {1, 256, 128, 3, true}, {1, 256, 128, 4, false}, {4, 64, 8, 3, false},
                        {4, 64, 8, 3, true},    {4, 44, 8, 3, true}};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<BatchShape> shapes;  // of the batches in bytes
  // Layouts 0 and 1 (a model per channel), then specs 0, 1, 8, 12 and 9 once more with one
  // model for every channel (layout 2) as 14..18.
  EncodeOptions per_channel;
  per_channel.allow_one_model = false;
  const size_t again[] = {0, 1, 8, 12, 9};
  for (size_t j = 0; j < std::size(specs) + std::size(again); ++j) {
    const size_t k = j < std::size(specs) ? j : again[j - std::size(specs)];
    const Spec& sp = specs[k];
    auto x = test::random_walk(sp.heads * sp.rows, sp.dim, 0.15f, static_cast<uint32_t>(k + 40));
    if (sp.cubed)
      for (float& v : x) v = v * v * v;
    bytes.push_back(encode_batch(quantize_to_codes_batch(x, sp.heads, sp.rows, sp.dim, sp.bits, 32),
                                 j < std::size(specs) ? per_channel : EncodeOptions{}));
    shapes.push_back(BatchShape{sp.heads, sp.rows, sp.dim, sp.bits, 32});
  }
  for (const size_t k : {6, 8, 9, 10})
    EXPECT_EQ(test::batch_layout(bytes[k]), 0) << k;  // independent records
  for (const size_t k : {14, 15, 16, 17, 18}) EXPECT_EQ(test::batch_layout(bytes[k]), 2) << k;
  const std::vector<std::vector<size_t>> lists = {
      {0, 1},
      {1, 2},
      {0, 3},
      {4, 5},
      {0, 1, 3, 2},
      {6, 0},
      {0, 7},
      {3, 4},
      {5},
      {0, 6, 1},
      {6, 0, 3, 7, 1},  // shared ones
                        // together
      {8, 9},
      {8, 9, 10},
      {0, 8, 1, 9},
      {6, 8},
      {8, 0, 9},  // independent ones
                  // paired
      {11, 12},
      {11, 12, 13, 11},
      {12, 0, 13},  // 4-lane payloads (a short chunk's K and V)
      {14, 15},
      {14, 0, 15, 1},
      {16, 8},
      {14, 16, 15, 17},
      {17, 11, 12},  // one model
      {16, 18},
      {18, 16, 14}};  // one-head ones: their parameters read in pairs across batches
  auto one_at_a_time = [&](const std::vector<size_t>& list,
                           const std::vector<std::vector<uint8_t>>& in) {
    std::vector<std::vector<Half>> out;
    for (size_t k : list) {
      out.emplace_back(shapes[k].n_heads * shapes[k].n_rows * shapes[k].dim);
      decode_batch_to_rows(in[k], shapes[k], out.back());
    }
    return out;
  };
  auto together = [&](const std::vector<size_t>& list,
                      const std::vector<std::vector<uint8_t>>& in) {
    std::vector<std::vector<Half>> out;
    for (size_t k : list) out.emplace_back(shapes[k].n_heads * shapes[k].n_rows * shapes[k].dim);
    std::vector<BatchRows> jobs;
    for (size_t i = 0; i < list.size(); ++i) jobs.push_back({in[list[i]], shapes[list[i]], out[i]});
    decode_batches_to_rows(jobs);
    return out;
  };
  for (const auto& list : lists) {
    set_simd_path(SimdPath::scalar);
    const auto want = one_at_a_time(list, bytes);
    for (size_t threads : {size_t{1}, size_t{2}}) {
      set_thread_count(threads);
      for (SimdPath p : paths()) {
        set_simd_path(p);
        const auto got = together(list, bytes);
        for (size_t i = 0; i < list.size(); ++i) {
          ASSERT_EQ(got[i].size(), want[i].size());
          for (size_t e = 0; e < got[i].size(); ++e)
            ASSERT_EQ(got[i][e].bits, want[i][e].bits)
                << simd_path_name(p) << " threads " << threads << " batch " << list[i];
        }
      }
    }
  }
  // Damage in any batch of a pair, or of a shared, independent, shared triple: the error
  // decode_batch_to_rows reports for the first batch that fails, message included.
  for (const auto& [list, victim] : {std::pair{std::vector<size_t>{0, 1}, size_t{0}},
                                     std::pair{std::vector<size_t>{0, 1}, size_t{1}},
                                     std::pair{std::vector<size_t>{0, 6, 1}, size_t{6}},
                                     std::pair{std::vector<size_t>{0, 6, 1}, size_t{1}},
                                     std::pair{std::vector<size_t>{8, 9}, size_t{8}},
                                     std::pair{std::vector<size_t>{8, 9}, size_t{9}},
                                     std::pair{std::vector<size_t>{8, 0, 9}, size_t{9}},
                                     std::pair{std::vector<size_t>{11, 12}, size_t{11}},
                                     std::pair{std::vector<size_t>{11, 12}, size_t{12}},
                                     std::pair{std::vector<size_t>{16, 18}, size_t{16}},
                                     std::pair{std::vector<size_t>{16, 18}, size_t{18}},
                                     std::pair{std::vector<size_t>{14, 15}, size_t{15}}}) {
    for (size_t i = 8; i < bytes[victim].size(); i += 29) {
      std::vector<std::vector<uint8_t>> bad = bytes;
      bad[victim][i] ^= 0x5a;
      std::string want = "ok";
      try {
        one_at_a_time(list, bad);
      } catch (const Error& e) {
        want = std::string(error_code_name(e.code())) + " " + e.what();
      }
      for (SimdPath p : paths()) {
        set_simd_path(p);
        std::string got = "ok";
        try {
          together(list, bad);
        } catch (const Error& e) {
          got = std::string(error_code_name(e.code())) + " " + e.what();
        }
        if (want == "ok") {
          EXPECT_EQ(got, "ok") << "batch " << victim << " byte " << i;  // a harmless flip
        } else {
          EXPECT_EQ(got, want) << simd_path_name(p) << " batch " << victim << " byte " << i;
        }
      }
    }
  }
  set_thread_count(0);
  set_simd_path(best_supported_simd_path());
}

TEST(CodecSimd, IndependentHeadsDecodedFourAtATimeMatchEachAlone) {
  // A batch of independent records decodes its heads four at a time (then a pair, then one):
  // 8-lane payloads of 4,096 codes (stories260K's chunk heads), 4-lane ones of 2,048 and
  // 32-lane ones of 128-wide heads, alternately of two distributions (each head its own
  // tables). Every path, one and two threads, against each head decoded alone on the scalar
  // path; damage in any head fails as that head alone does.
  for (const auto& [dim, rows] :
       {std::pair<size_t, size_t>{8, 512}, std::pair<size_t, size_t>{8, 256},
        std::pair<size_t, size_t>{128, 256}}) {
    const size_t heads = 7;
    std::vector<std::vector<uint8_t>> streams;
    for (size_t h = 0; h < heads; ++h) {
      auto x = test::random_walk(rows, dim, 0.15f, static_cast<uint32_t>(h + 70));
      if (h % 2)
        for (float& v : x) v = v * v * v;
      streams.push_back(encode_values(x, rows, dim, 3, 32));
    }
    const std::vector<uint8_t> batch = test::independent_batch(streams);
    ASSERT_EQ(test::batch_layout(batch), 0);
    set_simd_path(SimdPath::scalar);
    std::vector<Half> want;
    for (const auto& s : streams) {
      const std::vector<Half> one = decode_to_half(s);
      want.insert(want.end(), one.begin(), one.end());
    }
    const BatchShape shape{heads, rows, dim, 3, 32};
    for (size_t threads : {size_t{1}, size_t{2}}) {
      set_thread_count(threads);
      for (SimdPath p : paths()) {
        set_simd_path(p);
        SCOPED_TRACE(std::string(simd_path_name(p)) + " dim " + std::to_string(dim) + " threads " +
                     std::to_string(threads));
        const std::vector<Half> got = decode_batch_to_half(batch);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i].bits, want[i].bits) << i;
        std::vector<Half> rows_out(want.size());
        decode_batch_to_rows(batch, shape, rows_out);
        for (size_t h = 0; h < heads; ++h)
          for (size_t t = 0; t < rows; ++t)
            for (size_t c = 0; c < dim; ++c)
              ASSERT_EQ(rows_out[(t * heads + h) * dim + c].bits,
                        want[(h * rows + t) * dim + c].bits);
      }
    }
    set_thread_count(2);
    for (size_t victim = 0; victim < heads; ++victim) {
      // A byte of the head's payload (its record's last bytes) changed.
      std::vector<std::vector<uint8_t>> bad = streams;
      bad[victim][bad[victim].size() - 3 - victim] ^= 0x5a;
      set_simd_path(SimdPath::scalar);
      std::string want_outcome = "ok";
      try {
        decode_to_half(bad[victim]);
      } catch (const Error& e) {
        want_outcome = error_code_name(e.code());
      }
      ASSERT_NE(want_outcome, "ok") << "head " << victim;  // not a harmless flip
      const std::vector<uint8_t> bad_batch = test::independent_batch(bad);
      for (SimdPath p : paths()) {
        set_simd_path(p);
        std::string got = "ok";
        try {
          decode_batch_to_half(bad_batch);
        } catch (const Error& e) {
          got = error_code_name(e.code());
        }
        EXPECT_EQ(got, want_outcome) << simd_path_name(p) << " head " << victim;
      }
    }
  }
  set_simd_path(best_supported_simd_path());
  set_thread_count(0);
}

}  // namespace
}  // namespace cachegen
