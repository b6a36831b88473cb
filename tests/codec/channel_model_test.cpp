// The encoder's model search (choose_channel_model) against a direct statement of what it
// must choose: every precision and Exp-Golomb order tried, frequencies normalised by taking
// from the current largest one step at a time. The search's shortcuts (sorted take order,
// packed Exp-Golomb bit counts, lower bounds that skip kinds or stop the precision loop) must
// not change the choice: the files encoders write depend on it. And the model reader (several
// frequencies per load) against reading them one at a time.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "codec/channel_model.h"
#include "core/checks.h"

namespace cachegen::detail {
namespace {

struct Choice {
  ChannelKind kind = ChannelKind::uniform;
  int t = 0, eg_k = 0;
  uint64_t cost_fp = 0;
  std::vector<uint16_t> freq;
};

// The normalisation FORMAT.md's encoder performs, one largest frequency at a time.
bool reference_normalize(const std::vector<uint32_t>& counts, int t, std::vector<uint16_t>& freq) {
  const uint32_t target = 1u << t;
  uint64_t total = 0;
  size_t present = 0, most = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    if (counts[s] == 0) continue;
    ++present;
    total += counts[s];
    if (counts[s] > counts[most] || counts[most] == 0) most = s;
  }
  if (present > target) return false;
  freq.assign(counts.size(), 0);
  uint32_t sum = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    if (counts[s] == 0) continue;
    uint64_t f = (static_cast<uint64_t>(counts[s]) * target + total / 2) / total;
    if (f == 0) f = 1;
    freq[s] = static_cast<uint16_t>(f > target ? target : f);
    sum += freq[s];
  }
  while (sum > target) {
    size_t big = most;
    for (size_t s = 0; s < counts.size(); ++s)
      if (counts[s] != 0 && freq[s] > freq[big]) big = s;
    const uint32_t take = std::min<uint32_t>(sum - target, freq[big] - 1u);
    freq[big] = static_cast<uint16_t>(freq[big] - take);
    sum -= take;
  }
  freq[most] = static_cast<uint16_t>(freq[most] + (target - sum));
  return true;
}

Choice reference_table(ChannelKind kind, const std::vector<uint32_t>& counts, size_t n_rows,
                       int bits) {
  Choice best;
  best.kind = kind;
  best.cost_fp = UINT64_MAX;
  uint32_t last = 0;
  for (uint32_t j = 0; j < counts.size(); ++j)
    if (counts[table_order_symbol(kind, j, bits)] != 0) last = j;
  for (int t = 1; t <= max_table_precision(n_rows); ++t) {
    std::vector<uint16_t> freq;
    if (!reference_normalize(counts, t, freq)) continue;
    uint64_t data = 0;
    for (size_t s = 0; s < counts.size(); ++s)
      if (counts[s] != 0) data += uint64_t{counts[s]} * ((uint64_t(t) << 16) - log2_fixed(freq[s]));
    for (int k = 0; k < 4; ++k) {
      uint64_t desc = 2 + 4 + 2 + static_cast<uint64_t>(bits);
      for (uint32_t j = 0; j < last; ++j)
        desc += static_cast<uint64_t>(
            BitWriter::exp_golomb_bits(freq[table_order_symbol(kind, j, bits)], k));
      const uint64_t cost = (desc << 16) + data;
      if (cost < best.cost_fp) best = {kind, t, k, cost, freq};
    }
  }
  return best;
}

Choice reference_choice(const std::vector<uint32_t>& raw, const std::vector<uint32_t>& delta,
                        size_t n_rows, int bits) {
  size_t present = 0;
  for (uint32_t c : raw) present += c != 0;
  Choice best;
  if (present <= 1) {
    best.kind = ChannelKind::constant;
    best.cost_fp = static_cast<uint64_t>(2 + bits) << 16;
    return best;
  }
  best.kind = ChannelKind::uniform;
  best.cost_fp = static_cast<uint64_t>(2 + n_rows * bits) << 16;
  for (const auto* counts : {&raw, &delta}) {
    if (counts->empty()) continue;
    const Choice c = reference_table(
        counts == &raw ? ChannelKind::raw_table : ChannelKind::delta_table, *counts, n_rows, bits);
    if (c.cost_fp < best.cost_fp) best = c;
  }
  return best;
}

// Histograms of n_rows symbols: geometric around a few modes, plus rare symbols scattered
// over the alphabet (the case where normalising at a low precision raises many symbols to
// 1 and takes from several large ones).
std::vector<uint32_t> random_counts(std::mt19937& rng, int bits, size_t n_rows) {
  const size_t n_syms = size_t{1} << bits;
  std::vector<uint32_t> counts(n_syms, 0);
  std::geometric_distribution<int> spread(std::uniform_real_distribution<double>(0.05, 0.9)(rng));
  std::uniform_int_distribution<size_t> any(0, n_syms - 1);
  if (n_rows >= 32 && rng() % 3 == 0) {
    // Plateaus: `equal` symbols of one count (ties for the largest frequency), the other rows
    // on random symbols.
    const size_t equal = 2 + rng() % 6, each = 1 + rng() % (n_rows / (2 * equal));
    for (size_t e = 0; e < equal; ++e) counts[e * n_syms / equal] = static_cast<uint32_t>(each);
    size_t used = 0;
    for (uint32_t c : counts) used += c;
    for (size_t i = used; i < n_rows; ++i) ++counts[any(rng)];
    return counts;
  }
  const size_t mode = any(rng);
  const double rare = std::uniform_real_distribution<double>(0.0, 0.4)(rng);
  for (size_t i = 0; i < n_rows; ++i) {
    if (std::uniform_real_distribution<double>(0, 1)(rng) < rare) {
      ++counts[any(rng)];
    } else {
      const int d = spread(rng) * ((rng() & 1) ? 1 : -1);
      ++counts[(mode + n_syms + static_cast<size_t>(d % static_cast<int>(n_syms))) % n_syms];
    }
  }
  return counts;
}

TEST(ChannelModelSearch, ChoosesWhatTheDirectSearchChooses) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int bits = 1 + static_cast<int>(rng() % 8);
    const size_t n_rows = std::vector<size_t>{2, 9, 32, 100, 256, 1024, 4096}[rng() % 7];
    const std::vector<uint32_t> raw = random_counts(rng, bits, n_rows);
    const std::vector<uint32_t> delta =
        (rng() & 1) ? random_counts(rng, bits, n_rows) : std::vector<uint32_t>();
    const Choice want = reference_choice(raw, delta, n_rows, bits);
    const ChannelModel got = choose_channel_model(raw, delta, n_rows, bits);
    SCOPED_TRACE("trial " + std::to_string(trial) + ", bits " + std::to_string(bits) + ", rows " +
                 std::to_string(n_rows));
    ASSERT_EQ(got.kind, want.kind);
    ASSERT_EQ(got.cost_fp, want.cost_fp);
    ASSERT_EQ(channel_model_cost(raw, delta, n_rows, bits), want.cost_fp);
    // The bound is what lets the encoder skip searches: never above the cost, and never
    // below the data's entropy plus the fixed fields (a bound that gave up would prove
    // nothing).
    const uint64_t bound = channel_cost_lower_bound(raw, delta, n_rows, bits);
    ASSERT_LE(bound, want.cost_fp);
    if (want.kind == ChannelKind::constant) {
      ASSERT_EQ(bound, want.cost_fp);
    } else {
      double floor_fp = static_cast<double>(2 + n_rows * bits);
      for (const auto* counts : {&raw, &delta}) {
        if (counts->empty()) continue;
        double bits_total = 2 + 4 + 2 + bits;
        for (uint32_t c : *counts)
          if (c) bits_total -= c * std::log2(static_cast<double>(c) / static_cast<double>(n_rows));
        floor_fp = std::min(floor_fp, bits_total);
      }
      ASSERT_GE(static_cast<double>(bound), floor_fp * 65536.0 * (1 - 1e-6) - 2048);
    }
    if (want.kind == ChannelKind::raw_table || want.kind == ChannelKind::delta_table) {
      ASSERT_EQ(got.table.t, want.t);
      ASSERT_EQ(got.eg_k, want.eg_k);
      ASSERT_EQ(got.table.freq, want.freq);
    }
  }
}

// The encoder's plan takes the bounds of every channel of a head in one call, in blocks: each
// channel's bound is the one it has alone, across block boundaries and for constant channels.
TEST(ChannelModelSearch, BoundsOfManyChannelsAreEachChannelsOwn) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int bits = 1 + static_cast<int>(rng() % 8);
    const size_t n_syms = size_t{1} << bits;
    const size_t n_rows = std::vector<size_t>{2, 32, 256, 5000}[rng() % 4];
    const size_t n_channels = std::vector<size_t>{1, 7, 64, 65, 130}[rng() % 5];
    const bool with_delta = rng() & 1;
    std::vector<uint32_t> raw, delta;
    for (size_t c = 0; c < n_channels; ++c) {
      std::vector<uint32_t> r = random_counts(rng, bits, n_rows);
      if (rng() % 8 == 0) {  // a constant channel
        std::fill(r.begin(), r.end(), 0u);
        r[rng() % n_syms] = static_cast<uint32_t>(n_rows);
      }
      raw.insert(raw.end(), r.begin(), r.end());
      const std::vector<uint32_t> d = random_counts(rng, bits, n_rows);
      delta.insert(delta.end(), d.begin(), d.end());
    }
    std::vector<uint64_t> bounds(n_channels + 1, 12345);
    channel_cost_lower_bounds(raw.data(), with_delta ? delta.data() : nullptr, n_channels, n_rows,
                              bits, bounds.data());
    SCOPED_TRACE("trial " + std::to_string(trial));
    ASSERT_EQ(bounds[n_channels], 12345u);  // nothing written past the last channel
    for (size_t c = 0; c < n_channels; ++c) {
      const std::span<const uint32_t> r(raw.data() + c * n_syms, n_syms);
      const std::span<const uint32_t> d =
          with_delta ? std::span<const uint32_t>(delta.data() + c * n_syms, n_syms)
                     : std::span<const uint32_t>();
      ASSERT_EQ(bounds[c], channel_cost_lower_bound(r, d, n_rows, bits)) << "channel " << c;
      ASSERT_LE(bounds[c], channel_model_cost(r, d, n_rows, bits)) << "channel " << c;
    }
  }
}

// The model reader reads a table's frequencies several per load: what it returns, or the error
// it reports, must be what reading them one at a time (each code, then the running sum's
// check) gives, on written models and on damaged and truncated ones, from any bit offset.
void read_one_at_a_time(BitReader& r, int bits, size_t n_rows, ChannelModel& m) {
  m = ChannelModel{};
  m.kind = static_cast<ChannelKind>(r.get(2, "channel model kind"));
  if (m.kind == ChannelKind::constant) {
    m.constant_symbol = static_cast<uint8_t>(r.get(bits, "constant channel symbol"));
    return;
  }
  if (m.kind == ChannelKind::uniform) return;
  const int t = static_cast<int>(r.get(4, "table precision")) + 1;
  if (t > max_table_precision(n_rows)) {
    fail(ErrorCode::corrupt_input, "codec stream: table precision " + std::to_string(t) +
                                       " exceeds the limit " +
                                       std::to_string(max_table_precision(n_rows)) + " for " +
                                       std::to_string(n_rows) + " rows");
  }
  m.eg_k = static_cast<int>(r.get(2, "table Exp-Golomb order"));
  m.table.t = t;
  m.table.freq.assign(size_t{1} << bits, 0);
  const uint32_t last = static_cast<uint32_t>(r.get(bits, "table last index"));
  uint64_t sum = 0;
  for (uint32_t j = 0; j < last; ++j) {
    const uint64_t f = r.exp_golomb(m.eg_k, "table frequency");
    sum += f;
    if (sum >= (uint64_t{1} << t)) {
      fail(ErrorCode::corrupt_input, "codec stream: table frequencies reach 2^" +
                                         std::to_string(t) + " before the last symbol");
    }
    m.table.freq[table_order_symbol(m.kind, j, bits)] = static_cast<uint16_t>(f);
  }
  m.table.freq[table_order_symbol(m.kind, last, bits)] =
      static_cast<uint16_t>((uint64_t{1} << t) - sum);
}

// Three models after `skip` bits: each model's fields (or the error's message).
template <class Read>
std::string read_models(std::span<const uint8_t> bytes, size_t skip, int bits, size_t n_rows,
                        Read read) {
  std::ostringstream out;
  try {
    BitReader r(bytes, 0);
    (void)r.get(static_cast<int>(skip), "skip");
    for (int c = 0; c < 3; ++c) {
      ChannelModel m;
      read(r, bits, n_rows, m);
      out << static_cast<int>(m.kind) << ' ' << int{m.constant_symbol} << ':';
      if (m.kind == ChannelKind::raw_table || m.kind == ChannelKind::delta_table) {
        out << ' ' << m.eg_k << ' ' << m.table.t << ':';
        for (const uint16_t f : m.table.freq) out << ' ' << f;
      }
      out << '\n';
    }
  } catch (const Error& e) {
    out << e.what();
  }
  return out.str();
}

TEST(ChannelModelRead, ReadsWhatReadingOneAtATimeReads) {
  std::mt19937 rng(11);
  size_t failed = 0, tables = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const int bits = 1 + static_cast<int>(rng() % 8);
    const size_t n_rows = std::vector<size_t>{9, 100, 256, 512, 4096}[rng() % 5];
    const size_t skip = rng() % 13;
    BitWriter w;
    w.put(rng() & ((1u << skip) - 1), static_cast<int>(skip));
    for (int c = 0; c < 3; ++c) {
      const ChannelModel m = choose_channel_model(random_counts(rng, bits, n_rows),
                                                  random_counts(rng, bits, n_rows), n_rows, bits);
      tables += m.kind == ChannelKind::raw_table || m.kind == ChannelKind::delta_table;
      write_channel_model(w, m, bits);
    }
    std::vector<uint8_t> bytes = w.finish();
    if (trial % 4 != 0 && !bytes.empty()) {  // damaged: bits flipped, or cut short
      if (rng() % 2) {
        for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k)
          bytes[rng() % bytes.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      } else {
        bytes.resize(rng() % bytes.size());
      }
    }
    const std::string want = read_models(bytes, skip, bits, n_rows, read_one_at_a_time);
    const std::string got = read_models(bytes, skip, bits, n_rows, read_channel_model);
    ASSERT_EQ(got, want) << "trial " << trial;
    failed += want.find("codec stream") != std::string::npos;
  }
  // Both outcomes were exercised, and tables (the frequency lists) among the models.
  EXPECT_GT(failed, 1000u);
  EXPECT_GT(tables, 5000u);
}

}  // namespace
}  // namespace cachegen::detail
