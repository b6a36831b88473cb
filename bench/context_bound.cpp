// How small context models could make the codes (issue item 5, docs/PERFORMANCE.md "Size from
// context"): each window's codes (quantized as `bench_codec` does: bits 3, groups of 32) coded
// adaptively in a context (Krichevsky-Trofimov counts, optionally starting from a prior of
// strength M learned from the model's other windows, so no table is stored), in bits, as a
// share of zstd -19 of the same codes. The coder's own payload is printed beside it.
//
//   context_bound A.npy B.npy [...]   (two or more windows of one model: [L, 2, T, H, D] fp16)
#include <zstd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cachegen/codec.h"
#include "cachegen/npy.h"
#include "cachegen/quant.h"

namespace {

using namespace cachegen;

constexpr int kBits = 3, kSymbols = 1 << kBits;
constexpr size_t kGroup = 32;

struct Window {
  size_t heads = 0, rows = 0, dim = 0;
  std::vector<uint8_t> codes;  // [heads, rows, dim]
  size_t zstd19 = 0, payload = 0;
};

Window load(const std::string& path) {
  const NpyArray a = read_npy(path);
  if (a.shape.size() != 5 || a.dtype != NpyDType::f16)
    throw std::runtime_error(path + ": expected fp16 [L, 2, T, H, D]");
  const size_t L = a.shape[0], T = a.shape[2], H = a.shape[3], D = a.shape[4];
  const Half* src = reinterpret_cast<const Half*>(a.data.data());
  Window w{L * 2 * H, T, D, {}, 0, 0};
  std::vector<Half> heads(w.heads * T * D);  // head-major, as bench_codec lays it out
  for (size_t lk = 0; lk < L * 2; ++lk)
    for (size_t t = 0; t < T; ++t)
      for (size_t h = 0; h < H; ++h)
        std::memcpy(&heads[((lk * H + h) * T + t) * D], &src[((lk * T + t) * H + h) * D], D * 2);
  const std::vector<CodeStream> streams =
      quantize_to_codes_batch(std::span<const Half>(heads), w.heads, T, D, kBits, kGroup);
  for (const CodeStream& s : streams)
    w.codes.insert(w.codes.end(), s.codes.begin(), s.codes.begin() + s.n_rows * s.dim);
  const std::vector<uint8_t> coded = encode_batch(streams);
  w.payload = coded.size() - coded_size_report_batch(coded).param_bytes;
  std::vector<uint8_t> z(ZSTD_compressBound(w.codes.size()));
  w.zstd19 = ZSTD_compress(z.data(), z.size(), w.codes.data(), w.codes.size(), 19);
  return w;
}

// The contexts: every value's context index under one rule.
enum class Rule { order0, prev, prev_seen, prev_per_head };
constexpr struct {
  Rule rule;
  const char* name;
} kRules[] = {
    {Rule::order0, "order 0, per channel"},
    {Rule::prev, "previous token's code, per channel"},
    {Rule::prev_seen, "previous code + group's 0/max seen, per channel"},
    {Rule::prev_per_head, "previous code, per head"},
};

std::vector<uint32_t> contexts(const Window& w, Rule rule) {
  std::vector<uint32_t> ctx(w.codes.size());
  for (size_t h = 0; h < w.heads; ++h) {
    for (size_t c = 0; c < w.dim; ++c) {
      bool seen_min = false, seen_max = false;
      for (size_t r = 0; r < w.rows; ++r) {
        if (r % kGroup == 0) seen_min = seen_max = false;
        const size_t i = (h * w.rows + r) * w.dim + c;
        const uint32_t prev = r == 0 ? kSymbols : w.codes[i - w.dim];  // kSymbols: none
        const uint32_t channel = static_cast<uint32_t>(h * w.dim + c);
        switch (rule) {
          case Rule::order0:
            ctx[i] = channel;
            break;
          case Rule::prev:
            ctx[i] = channel * (kSymbols + 1) + prev;
            break;
          case Rule::prev_seen:
            ctx[i] = (channel * (kSymbols + 1) + prev) * 4 + seen_min * 2 + seen_max;
            break;
          case Rule::prev_per_head:
            ctx[i] = static_cast<uint32_t>(h) * (kSymbols + 1) + prev;
            break;
        }
        seen_min = seen_min || w.codes[i] == 0;
        seen_max = seen_max || w.codes[i] == kSymbols - 1;
      }
    }
  }
  return ctx;
}

// Bits of coding test's codes adaptively in their contexts, each context's counts starting at
// 1/2 + M times the context's symbol shares in `train` (a Dirichlet prior: the code length is
// the same in any order of the values).
double adaptive_bits(const Window& test, const std::vector<uint32_t>& ctx,
                     const std::vector<const Window*>& train,
                     const std::vector<std::vector<uint32_t>>& train_ctx, double m) {
  size_t n_ctx = 0;
  for (uint32_t c : ctx) n_ctx = std::max<size_t>(n_ctx, c + 1);
  std::vector<double> prior(n_ctx * kSymbols, 0.0), seen(n_ctx * kSymbols, 0.0);
  for (size_t w = 0; w < train.size(); ++w)
    for (size_t i = 0; i < train[w]->codes.size(); ++i)
      if (train_ctx[w][i] < n_ctx) prior[train_ctx[w][i] * kSymbols + train[w]->codes[i]] += 1;
  for (size_t i = 0; i < test.codes.size(); ++i) seen[ctx[i] * kSymbols + test.codes[i]] += 1;
  double nats = 0;
  for (size_t c = 0; c < n_ctx; ++c) {
    double train_n = 0, n = 0, a_sum = 0;
    for (int s = 0; s < kSymbols; ++s) train_n += prior[c * kSymbols + s];
    for (int s = 0; s < kSymbols; ++s) n += seen[c * kSymbols + s];
    if (n == 0) continue;
    for (int s = 0; s < kSymbols; ++s) {
      const double a = 0.5 + (train_n > 0 && m > 0 ? m * prior[c * kSymbols + s] / train_n : 0.0);
      a_sum += a;
      nats -= std::lgamma(seen[c * kSymbols + s] + a) - std::lgamma(a);
    }
    nats += std::lgamma(n + a_sum) - std::lgamma(a_sum);
  }
  return nats / std::log(2.0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: context_bound A.npy B.npy [...] (windows of one model)\n");
    return 2;
  }
  try {
    std::vector<Window> windows;
    for (int i = 1; i < argc; ++i) windows.push_back(load(argv[i]));
    double z = 0, payload = 0;
    for (const Window& w : windows) z += w.zstd19, payload += w.payload;
    std::printf(
        "%zu windows, bits %d, groups of %zu: the coder's payload %.3f of zstd -19 "
        "(%.3f bits/value); aim 0.85\n",
        windows.size(), kBits, kGroup, payload / z,
        8 * z / static_cast<double>(windows.size() * windows[0].codes.size()));
    const double strengths[] = {0, 32, 128, 1024};
    std::printf("%-52s", "context (adaptive; M: prior from the other windows)");
    for (double m : strengths) std::printf("   M=%-5.0f", m);
    std::printf("\n");
    for (const auto& [rule, name] : kRules) {
      std::vector<std::vector<uint32_t>> ctx;
      for (const Window& w : windows) ctx.push_back(contexts(w, rule));
      std::printf("%-52s", name);
      for (double m : strengths) {
        double bits = 0;
        for (size_t t = 0; t < windows.size(); ++t) {  // each window against the others
          std::vector<const Window*> train;
          std::vector<std::vector<uint32_t>> train_ctx;
          for (size_t o = 0; o < windows.size(); ++o) {
            if (o == t) continue;
            train.push_back(&windows[o]);
            train_ctx.push_back(ctx[o]);
          }
          bits += adaptive_bits(windows[t], ctx[t], train, train_ctx, m);
        }
        std::printf("   %7.3f", bits / (8 * z));
      }
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "context_bound: %s\n", e.what());
    return 1;
  }
  return 0;
}
