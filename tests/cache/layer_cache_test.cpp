// LayerKVCache: results independent of how tokens arrive; trim; fetch; accounting.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "cache/cache_test_inputs.h"
#include "cachegen/error.h"
#include "cachegen/kv_cache.h"
#include "cachegen/runtime.h"

namespace cachegen {
namespace {

using test::kv_walk;
using test::token_slice;
using test::view;

constexpr size_t kHeads = 4, kDim = 8, kTokens = 512;

bool same_half(const std::vector<Half>& a, const std::vector<Half>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 2) == 0);
}

// Appends tokens in the given call sizes (cycled until all are in).
LayerKVCache fill(const KVCacheConfig& cfg, const std::vector<Half>& k, const std::vector<Half>& v,
                  const std::vector<size_t>& sizes) {
  LayerKVCache c(kHeads, kDim, 3, 4, cfg);
  size_t t = 0, i = 0;
  while (t < kTokens) {
    const size_t n = std::min(sizes[i++ % sizes.size()], kTokens - t);
    const auto ks = token_slice(k, kHeads, kTokens, kDim, t, n);
    const auto vs = token_slice(v, kHeads, kTokens, kDim, t, n);
    c.append(view(ks, kHeads, n, kDim), view(vs, kHeads, n, kDim));
    t += n;
  }
  return c;
}

class CallSplits : public ::testing::TestWithParam<ParamMode> {};

// Whole groups arriving together are quantized a block at a time, others a group at a time.
// The second input holds a group whose channel is constant far from zero (key head 1, channel
// 3, tokens 160..191): the compact grid cannot hold its parameters, so quantized with its block
// every group of that head's block would fall back to fp16 ones; a group alone keeps the
// others' compact.
TEST_P(CallSplits, OneCallUnevenCallsAndSingleTokensAgree) {
  KVCacheConfig cfg;
  cfg.params = GetParam();
  cfg.block_tokens = 128;
  for (const bool constant_group : {false, true}) {
    SCOPED_TRACE(constant_group ? "a constant group" : "a random walk");
    auto k = kv_walk(kHeads, kTokens, kDim, 1);
    const auto v = kv_walk(kHeads, kTokens, kDim, 2);
    if (constant_group) {
      for (size_t t = 160; t < 192; ++t) k[(1 * kTokens + t) * kDim + 3] = float_to_half(1000.0f);
    }
    const LayerKVCache one = fill(cfg, k, v, {512});
    const LayerKVCache uneven = fill(cfg, k, v, {7, 100, 1, 250, 154});
    const LayerKVCache single = fill(cfg, k, v, {1});
    for (const LayerKVCache* c : {&uneven, &single}) {
      EXPECT_EQ(c->n_tokens(), kTokens);
      EXPECT_TRUE(same_half(c->fetch_keys(), one.fetch_keys()));
      EXPECT_TRUE(same_half(c->fetch_values(), one.fetch_values()));
      for (int kind = 0; kind < 2; ++kind) {
        const auto a = c->snapshot_blocks(kind), b = one.snapshot_blocks(kind);
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].bytes, b[i].bytes) << kind << " " << i;
      }
      const LayerStats s = c->stats(), r = one.stats();
      EXPECT_EQ(s.both.compressed_bytes, r.both.compressed_bytes);
      EXPECT_EQ(s.both.estimated_bytes, r.both.estimated_bytes);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CallSplits,
                         ::testing::Values(ParamMode::compact, ParamMode::reference));

TEST(LayerCache, ReferenceModeEqualsReferenceQuantizer) {
  KVCacheConfig cfg;
  cfg.params = ParamMode::reference;
  const size_t n = 100;  // 3 whole groups + 4 residual tokens
  const auto k = kv_walk(kHeads, n, kDim, 3), v = kv_walk(kHeads, n, kDim, 4);
  LayerKVCache c(kHeads, kDim, 3, 5, cfg);
  c.append(view(k, kHeads, n, kDim), view(v, kHeads, n, kDim));
  const std::vector<Half> got = c.fetch_keys();
  for (size_t h = 0; h < kHeads; ++h) {
    const std::span<const Half> head(k.data() + h * n * kDim, 96 * kDim);
    const std::vector<Half> want = dequant_codes(quantize_to_codes(head, 96, kDim, 3));
    EXPECT_EQ(0, std::memcmp(got.data() + h * n * kDim, want.data(), want.size() * 2));
    // Residual tokens are returned as stored.
    EXPECT_EQ(0, std::memcmp(got.data() + (h * n + 96) * kDim, k.data() + (h * n + 96) * kDim,
                             4 * kDim * 2));
  }
  EXPECT_EQ(c.stats().k.residual_tokens, 4u);
}

TEST(LayerCache, FetchRangeMatchesFullFetch) {
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  const auto k = kv_walk(kHeads, kTokens, kDim, 5), v = kv_walk(kHeads, kTokens, kDim, 6);
  const LayerKVCache c = fill(cfg, k, v, {77});
  const std::vector<Half> all = c.fetch_values();
  for (auto [a, b] : {std::pair<size_t, size_t>{0, 1}, {63, 65}, {100, 300}, {500, 512}, {5, 5}}) {
    const std::vector<Half> part = c.fetch_values(a, b);
    ASSERT_EQ(part.size(), kHeads * (b - a) * kDim);
    if (part.empty()) continue;  // memcmp's pointers must not be null, even for 0 bytes
    for (size_t h = 0; h < kHeads; ++h) {
      ASSERT_EQ(0, std::memcmp(part.data() + h * (b - a) * kDim,
                               all.data() + (h * kTokens + a) * kDim, (b - a) * kDim * 2));
    }
  }
}

TEST(LayerCache, TrimCorrectsCountersAndContent) {
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  const auto k = kv_walk(kHeads, kTokens, kDim, 7), v = kv_walk(kHeads, kTokens, kDim, 8);
  for (size_t trim : {0, 1, 5, 32, 33, 64, 100, 200, 511, 512}) {
    LayerKVCache c = fill(cfg, k, v, {512});
    const std::vector<Half> before = c.fetch_keys();
    c.trim(trim);
    const size_t n = kTokens - trim;
    ASSERT_EQ(c.n_tokens(), n);
    const std::vector<Half> after = c.fetch_keys();
    ASSERT_EQ(after.size(), kHeads * n * kDim);
    for (size_t h = 0; h < kHeads && n > 0; ++h) {
      ASSERT_EQ(0, std::memcmp(after.data() + h * n * kDim, before.data() + h * kTokens * kDim,
                               n * kDim * 2))
          << "trim " << trim;
    }
    const LayerStats s = c.stats();
    EXPECT_EQ(s.k.n_tokens, n);
    EXPECT_EQ(s.k.residual_tokens, n % 32);
    EXPECT_EQ(s.k.quantized_elements, (n - n % 32) * kHeads * kDim);
    // Appending after a trim keeps working and counting.
    const auto more = token_slice(k, kHeads, kTokens, kDim, 0, 40);
    c.append(view(more, kHeads, 40, kDim), view(more, kHeads, 40, kDim));
    EXPECT_EQ(c.n_tokens(), n + 40);
    EXPECT_EQ(c.fetch_values().size(), kHeads * (n + 40) * kDim);
  }
  LayerKVCache c(kHeads, kDim, 3, 3, cfg);
  EXPECT_THROW(c.trim(1), Error);
}

TEST(LayerCache, AccountingIsRealAndConsistent) {
  KVCacheConfig cfg;
  const auto k = kv_walk(kHeads, kTokens, kDim, 9), v = kv_walk(kHeads, kTokens, kDim, 10);
  const LayerKVCache c = fill(cfg, k, v, {512});
  const LayerStats s = c.stats();
  size_t block_bytes = 0;
  for (int kind = 0; kind < 2; ++kind) {
    for (const CompressedBlock& b : c.snapshot_blocks(kind)) block_bytes += b.bytes.size();
  }
  EXPECT_EQ(s.both.compressed_bytes, block_bytes);
  EXPECT_EQ(s.both.fp16_bytes, 2 * kHeads * kTokens * kDim * 2);
  EXPECT_LT(s.both.compressed_bytes, s.both.fixed_bytes);
  EXPECT_GT(s.both.entropy_savings(), 0.0);
  EXPECT_DOUBLE_EQ(s.k.assigned_avg_bits, 3.0);
  EXPECT_DOUBLE_EQ(s.both.assigned_avg_bits, 3.5);
  EXPECT_GT(s.both.memory_bytes, s.both.compressed_bytes);
  EXPECT_LT(s.both.memory_bytes, s.both.fp16_bytes);
  // A one-token decode step costs what its share costs, not more than fp16 (the reference's
  // defect): 32 single-token steps end up as one group, accounted like any other group.
  LayerKVCache d(kHeads, kDim, 3, 3, cfg);
  for (size_t t = 0; t < 32; ++t) {
    const auto ks = token_slice(k, kHeads, kTokens, kDim, t, 1);
    d.append(view(ks, kHeads, 1, kDim), view(ks, kHeads, 1, kDim));
  }
  EXPECT_LT(d.stats().both.compressed_bytes, d.stats().both.fp16_bytes);
}

TEST(LayerCache, InputsOfEveryDtype) {
  KVCacheConfig cfg;
  const size_t n = 40;
  const auto k = kv_walk(kHeads, n, kDim, 11);
  std::vector<float> kf(k.size());
  std::vector<BFloat16> kb(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    kf[i] = half_to_float(k[i]);
    uint32_t u;
    std::memcpy(&u, &kf[i], 4);
    kb[i] = BFloat16{static_cast<uint16_t>(u >> 16)};
  }
  LayerKVCache a(kHeads, kDim, 4, 4, cfg), b(kHeads, kDim, 4, 4, cfg);
  a.append(view(k, kHeads, n, kDim), view(k, kHeads, n, kDim));
  b.append({kf.data(), KVDType::f32, kHeads, n, kDim}, {kb.data(), KVDType::bf16, kHeads, n, kDim});
  EXPECT_TRUE(same_half(a.fetch_keys(), b.fetch_keys()));  // fp32 of fp16 values: same
  EXPECT_EQ(b.fetch_values().size(), k.size());
}

// [heads, tokens, dim] -> [tokens, heads, dim] (a llama.cpp or .npy row per token).
template <typename T>
std::vector<T> token_major(const std::vector<T>& x, size_t heads, size_t tokens, size_t dim) {
  std::vector<T> out(x.size());
  for (size_t h = 0; h < heads; ++h)
    for (size_t t = 0; t < tokens; ++t)
      for (size_t c = 0; c < dim; ++c)
        out[(t * heads + h) * dim + c] = x[(h * tokens + t) * dim + c];
  return out;
}

// Token-major input (read in place when fp16, converted when fp32) gives the cache the same
// groups as head-major input, over calls that cross group and block boundaries.
TEST(LayerCache, TokenMajorInputEqualsHeadMajor) {
  KVCacheConfig cfg;
  const auto k = kv_walk(kHeads, kTokens, kDim, 21), v = kv_walk(kHeads, kTokens, kDim, 22);
  const auto kt = token_major(k, kHeads, kTokens, kDim), vt = token_major(v, kHeads, kTokens, kDim);
  std::vector<float> ktf(kt.size());
  for (size_t i = 0; i < kt.size(); ++i) ktf[i] = half_to_float(kt[i]);
  const LayerKVCache head_major = fill(cfg, k, v, {37, 100, 3, 300});
  for (const bool f32 : {false, true}) {
    SCOPED_TRACE(f32 ? "fp32 keys" : "fp16");
    LayerKVCache c(kHeads, kDim, 3, 4, cfg);
    const size_t sizes[] = {37, 100, 3, 300};
    for (size_t t = 0, i = 0; t < kTokens; ++i) {
      const size_t n = std::min(sizes[i % 4], kTokens - t);
      const size_t at = t * kHeads * kDim;
      KVBlockView kb{kt.data() + at, KVDType::f16, kHeads, n, kDim, true};
      if (f32) kb = {ktf.data() + at, KVDType::f32, kHeads, n, kDim, true};
      c.append(kb, {vt.data() + at, KVDType::f16, kHeads, n, kDim, true});
      t += n;
    }
    EXPECT_TRUE(same_half(c.fetch_keys(), head_major.fetch_keys()));
    EXPECT_TRUE(same_half(c.fetch_values(), head_major.fetch_values()));
    for (int kind = 0; kind < 2; ++kind) {
      ASSERT_EQ(c.sealed_blocks(kind).size(), head_major.sealed_blocks(kind).size());
      for (size_t b = 0; b < c.sealed_blocks(kind).size(); ++b)
        EXPECT_EQ(c.sealed_blocks(kind)[b].bytes, head_major.sealed_blocks(kind)[b].bytes);
    }
  }
  // A NaN in a token-major fp16 view is found before anything changes.
  LayerKVCache c(kHeads, kDim, 3, 4, cfg);
  c.append({kt.data(), KVDType::f16, kHeads, 40, kDim, true},
           {vt.data(), KVDType::f16, kHeads, 40, kDim, true});
  auto bad = vt;
  bad[(45 * kHeads + 2) * kDim + 5] = Half{0x7c00};  // +Inf, token 45 of head 2
  const size_t at = 40 * kHeads * kDim;
  EXPECT_THROW(c.append({kt.data() + at, KVDType::f16, kHeads, 20, kDim, true},
                        {bad.data() + at, KVDType::f16, kHeads, 20, kDim, true}),
               Error);
  EXPECT_EQ(c.n_tokens(), 40u);
  LayerKVCache first40(kHeads, kDim, 3, 4, cfg);
  const auto k40 = token_slice(k, kHeads, kTokens, kDim, 0, 40);
  const auto v40 = token_slice(v, kHeads, kTokens, kDim, 0, 40);
  first40.append(view(k40, kHeads, 40, kDim), view(v40, kHeads, 40, kDim));
  EXPECT_TRUE(same_half(c.fetch_values(), first40.fetch_values()));
}

TEST(LayerCache, ConcurrentReadersOfASealedCacheAgree) {
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  const auto k = kv_walk(kHeads, kTokens, kDim, 13), v = kv_walk(kHeads, kTokens, kDim, 14);
  const LayerKVCache c = fill(cfg, k, v, {100});
  const std::vector<Half> want = c.fetch_keys();
  const size_t want_bytes = c.stats().both.compressed_bytes;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      for (int i = 0; i < 20; ++i) {
        if (!same_half(c.fetch_keys(), want)) ++mismatches;
        if (c.stats().both.compressed_bytes != want_bytes) ++mismatches;
        if (c.fetch_values(static_cast<size_t>(r) * 50, 300).size() !=
            kHeads * (300 - r * 50) * kDim) {
          ++mismatches;
        }
      }
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(LayerCache, BadInputLeavesCacheUnchanged) {
  KVCacheConfig cfg;
  LayerKVCache c(kHeads, kDim, 4, 4, cfg);
  auto k = kv_walk(kHeads, 10, kDim, 12);
  c.append(view(k, kHeads, 10, kDim), view(k, kHeads, 10, kDim));
  auto bad = k;
  bad[17] = Half{0x7e00};  // NaN
  EXPECT_THROW(c.append(view(bad, kHeads, 10, kDim), view(k, kHeads, 10, kDim)), Error);
  // Negative ones (sign bit set) and the largest finite half beside them.
  for (const uint16_t bits : {uint16_t{0xfc00}, uint16_t{0xfe01}}) {
    bad = k;
    bad[k.size() - 3] = Half{0x7bff};  // 65504: finite
    bad[k.size() - 2] = Half{bits};
    try {
      c.append(view(k, kHeads, 10, kDim), view(bad, kHeads, 10, kDim));
      ADD_FAILURE() << "accepted " << bits;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("at element " + std::to_string(k.size() - 2)),
                std::string::npos)
          << e.what();
    }
  }
  std::vector<float> huge(k.size(), 1e6f);
  EXPECT_THROW(c.append({huge.data(), KVDType::f32, kHeads, 10, kDim}, view(k, kHeads, 10, kDim)),
               Error);
  EXPECT_THROW(c.append(view(k, kHeads, 10, kDim), view(k, kHeads, 9, kDim)), Error);
  EXPECT_THROW(c.append(view(k, 3, 10, kDim), view(k, 3, 10, kDim)), Error);
  EXPECT_EQ(c.n_tokens(), 10u);
  EXPECT_TRUE(same_half(c.fetch_keys(), k));
}

// Appends taken in one step (whole groups inside the open block, or whole blocks on the pool's
// threads) leave the finiteness check to the quantizer: a non-finite value in K or V, found
// there, still leaves the cache as it was (the pending groups of the other kind, quantized
// before, dropped) and is reported at its place in the caller's view.
TEST(LayerCache, NonFiniteFoundByTheQuantizerLeavesCacheUnchanged) {
  KVCacheConfig cfg;
  cfg.block_tokens = 64;  // two groups of 32
  const auto k = kv_walk(kHeads, kTokens, kDim, 21), v = kv_walk(kHeads, kTokens, kDim, 22);
  const size_t threads_before = thread_count();
  struct Case {
    size_t before, n;  // tokens appended before the bad call, tokens in it
    size_t threads;
  };
  // Into an empty block, behind a pending group, a whole block, two whole blocks on the pool.
  for (const Case& c :
       {Case{0, 32, 1}, Case{32, 32, 1}, Case{64, 64, 1}, Case{32, 32, 2}, Case{64, 128, 2}}) {
    for (const int bad_kind : {0, 1}) {
      for (const bool by_token : {false, true}) {
        SCOPED_TRACE(std::to_string(c.before) + " + " + std::to_string(c.n) + " tokens, " +
                     std::to_string(c.threads) + " threads, bad " + (bad_kind ? "v" : "k") +
                     (by_token ? ", token-major" : ""));
        set_thread_count(c.threads);
        // The call's arrays, in the view's order; the bad value at head 2, its last token.
        const auto slice = [&](const std::vector<Half>& x, size_t t0, size_t n) {
          const auto s = token_slice(x, kHeads, kTokens, kDim, t0, n);
          return by_token ? token_major(s, kHeads, n, kDim) : s;
        };
        const auto as_view = [&](const std::vector<Half>& x, size_t n) {
          return KVBlockView{x.data(), KVDType::f16, kHeads, n, kDim, by_token};
        };
        LayerKVCache cache(kHeads, kDim, 3, 4, cfg), clean(kHeads, kDim, 3, 4, cfg);
        for (LayerKVCache* x : {&cache, &clean}) {
          if (c.before == 0) continue;
          const auto kb = slice(k, 0, c.before), vb = slice(v, 0, c.before);
          x->append(as_view(kb, c.before), as_view(vb, c.before));
        }
        const auto kg = slice(k, c.before, c.n), vg = slice(v, c.before, c.n);
        std::vector<Half> kb = kg, vb = vg;
        const size_t at =
            by_token ? ((c.n - 1) * kHeads + 2) * kDim + 5 : (2 * c.n + c.n - 1) * kDim + 5;
        (bad_kind ? vb : kb)[at] = Half{0x7e00};  // NaN
        try {
          cache.append(as_view(kb, c.n), as_view(vb, c.n));
          ADD_FAILURE() << "a NaN accepted";
        } catch (const Error& e) {
          const std::string want =
              std::string("invalid_argument: ") + (bad_kind ? "v" : "k") +
              " holds a NaN, Inf or a value beyond the fp16 range at element " + std::to_string(at);
          EXPECT_EQ(e.what(), want);
        }
        EXPECT_EQ(cache.n_tokens(), c.before);
        // The good rows after it, and the rest: the same cache as one never given the bad call.
        for (LayerKVCache* x : {&cache, &clean}) {
          x->append(as_view(kg, c.n), as_view(vg, c.n));
          const size_t rest = kTokens - c.before - c.n;
          const auto kr = slice(k, c.before + c.n, rest), vr = slice(v, c.before + c.n, rest);
          x->append(as_view(kr, rest), as_view(vr, rest));
        }
        EXPECT_EQ(cache.n_tokens(), kTokens);
        EXPECT_TRUE(same_half(cache.fetch_keys(), clean.fetch_keys()));
        EXPECT_TRUE(same_half(cache.fetch_values(), clean.fetch_values()));
        for (int kind = 0; kind < 2; ++kind) {
          const auto a = cache.snapshot_blocks(kind), b = clean.snapshot_blocks(kind);
          ASSERT_EQ(a.size(), b.size());
          for (size_t i = 0; i < a.size(); ++i)
            EXPECT_EQ(a[i].bytes, b[i].bytes) << kind << " " << i;
        }
      }
    }
  }
  set_thread_count(threads_before);
}

}  // namespace
}  // namespace cachegen
