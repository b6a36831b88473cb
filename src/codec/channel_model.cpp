#include "codec/channel_model.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cachegen/runtime.h"
#include "quant/kernels.h"

namespace cachegen::detail {
namespace {

constexpr uint32_t kMaxLog2Table = 1u << kMaxPrecision;
constexpr int kKindBits = 2, kPrecisionBits = 4, kEgOrderBits = 2;

// A histogram as the search reads it: the present symbols (ascending) and their counts side by
// side, the most frequent one (its index there; the lowest symbol on ties) and the total.
struct Present {
  uint16_t sym[256];
  uint32_t count[256];
  size_t n = 0, most = 0;
  uint64_t total = 0;
  explicit Present(std::span<const uint32_t> counts) {
    if (counts.size() >= 32) {
      n = quant_kernels().present_symbols(counts.data(), counts.size(), sym, count);
    } else {  // the kernel's own loop, without a call through its table (3-bit codes' cost)
      for (size_t s = 0; s < counts.size(); ++s) {
        sym[n] = static_cast<uint16_t>(s);
        count[n] = counts[s];
        n += counts[s] != 0;
      }
    }
    uint32_t most_count = 0;
    for (size_t i = 0; i < n; ++i) {
      const bool more = count[i] > most_count;
      most = more ? i : most;
      most_count = more ? count[i] : most_count;
      total += count[i];
    }
  }
};

// What normalize needs of a histogram beyond its counts, the same at every precision (formed
// where a table is searched: a bound may spare it).
struct Shares {
  double share[256];      // the doubles nearest count * inv_total
  double half_share = 0;  // the double nearest floor(total / 2) * inv_total, plus 2^-36
  explicit Shares(const Present& p) {
    const double inv_total = p.total ? 1.0 / static_cast<double>(p.total) : 0.0;
    for (size_t i = 0; i < p.n; ++i) share[i] = static_cast<double>(p.count[i]) * inv_total;
    half_share = static_cast<double>(p.total / 2) * inv_total + 0x1p-36;
  }
};

// Normalises counts to frequencies summing to 2^t, every present symbol >= 1. Deterministic
// integer arithmetic; returns false when 2^t cannot hold every present symbol. Writes f[i],
// the frequency of present symbol p.sym[i], for i < p.n.
bool normalize(const Present& p, const Shares& sh, int t, uint16_t* f) {
  const uint32_t target = 1u << t;
  if (p.n > target) return false;
  uint32_t sum = 0;
  if (p.total <= (uint64_t{1} << 32)) {
    // floor(a / total), a = count * 2^t + floor(total / 2), without a 64-bit division (its
    // latency was half of this function): a / total <= 2^12 + 1/2 is an integer or at least
    // 1 / total >= 2^-32 below the next one. share * 2^t + half_share (IEEE double, the same
    // on every machine) is within 2^-39 of it plus 2^-36 (share * 2^t and the sum are within
    // 2^-40 and 2^-41, half_share within 2^-52), so truncating gives the same integer. The
    // shares are formed once per histogram: a precision's pass is one multiply-add per
    // symbol (a loop the compiler vectorises).
    // q <= 2^t (count <= total), so only the floor at 1 is needed: q + (q == 0), as q >= 0
    // (a compare and a subtract where SSE2 has no integer max).
    const double scale = static_cast<double>(target);
    for (size_t i = 0; i < p.n; ++i) {
      int32_t q = static_cast<int32_t>(sh.share[i] * scale + sh.half_share);
      q += q == 0;
      f[i] = static_cast<uint16_t>(q);
      sum += static_cast<uint32_t>(q);
    }
  } else {
    for (size_t i = 0; i < p.n; ++i) {
      uint64_t q = (static_cast<uint64_t>(p.count[i]) * target + p.total / 2) / p.total;
      if (q == 0) q = 1;
      f[i] = static_cast<uint16_t>(q > target ? target : q);
      sum += f[i];
    }
  }
  // Over the target: take from the largest frequency (the most frequent symbol first, then
  // the lowest symbol among equal ones), down to 1 at most, until the sum fits. The most
  // frequent symbol's frequency is the largest (rounding is monotone), so it goes first; the
  // others follow in descending order of frequency. Usually one or two of them cover the
  // excess, so each is found by a scan for the largest (the first on ties): the ones taken
  // before are at 1 by then, below any that can still give. Past a few, the rest is sorted
  // once (a scan per step was most of the model search when many symbols were raised to 1).
  const auto take_from = [&](size_t i) {
    const uint32_t take = sum - target < f[i] - 1u ? sum - target : f[i] - 1u;
    f[i] = static_cast<uint16_t>(f[i] - take);
    sum -= take;
  };
  if (sum > target) take_from(p.most);
  for (int picks = 0; picks < 4 && sum > target; ++picks) {
    // The largest value (a loop the compiler vectorises), then its first place: a scan that
    // carried the index was a chain of dependent selects.
    uint16_t top = 0;  // sum > target >= p.n: some frequency is above 1
    for (size_t i = 0; i < p.n; ++i) top = f[i] > top ? f[i] : top;
    size_t largest = 0;
    while (f[largest] != top) ++largest;
    take_from(largest);
  }
  if (sum > target) {
    uint16_t rest[256];  // indices of present symbols that can still give
    size_t m = 0;
    for (size_t i = 0; i < p.n; ++i) {
      rest[m] = static_cast<uint16_t>(i);
      m += f[i] > 1;
    }
    // Indices ascend with symbols, so the lower index wins a tie.
    std::sort(rest, rest + m,
              [&](uint16_t a, uint16_t b) { return f[a] != f[b] ? f[a] > f[b] : a < b; });
    for (size_t j = 0; j < m && sum > target; ++j) take_from(rest[j]);
  }
  f[p.most] = static_cast<uint16_t>(f[p.most] + (target - sum));
  return true;
}

uint32_t log2_fixed_compute(uint32_t v) {
  // Integer part from the bit length, then 16 fractional bits by repeated squaring of the
  // mantissa held in 1.31 fixed point.
  int ip = 31 - __builtin_clz(v);
  uint64_t m = static_cast<uint64_t>(v) << (31 - ip);  // in [2^31, 2^32)
  uint32_t frac = 0;
  for (int i = 15; i >= 0; --i) {
    m = (m * m) >> 31;
    if (m >= (uint64_t{1} << 32)) {
      m >>= 1;
      frac |= 1u << i;
    }
  }
  return (static_cast<uint32_t>(ip) << 16) | frac;
}

// The model search evaluates log2 of every candidate frequency at every precision: a table
// of the same integer results makes it a load instead of 16 squarings.
struct Log2Table {
  uint32_t v[kMaxLog2Table + 1];
  Log2Table() {
    v[0] = 0;
    for (uint32_t i = 1; i <= kMaxLog2Table; ++i) v[i] = log2_fixed_compute(i);
  }
};
const uint32_t* log2_fixed_table() {
  static const Log2Table table;
  return table.v;
}

// table_order_symbol(kind, j, bits) for every j, from a table (the model writer and reader
// take the list order of every channel).
struct ListOrders {
  uint16_t symbol[2][9][256];
  ListOrders() {
    for (int k = 0; k < 2; ++k)
      for (int b = 0; b <= 8; ++b)
        for (uint32_t j = 0; j < 256; ++j) {
          const uint32_t s =
              k == 1 && j < (1u << b) ? table_order_symbol(ChannelKind::delta_table, j, b) : j;
          symbol[k][b][j] = static_cast<uint16_t>(s);
        }
  }
};
const uint16_t* list_order(ChannelKind kind, int bits) {
  static const ListOrders orders;
  return orders.symbol[kind == ChannelKind::delta_table ? 1 : 0][bits];
}

// Where a table's frequency list ends: the present symbol listed last (list order of `kind`),
// its place in the list and its index among the present symbols. A raw table lists symbols in
// order: the last present one. A delta table lists 0, -1, +1, -2, ... (mod 2^bits): symbol s
// below 2^(bits-1) at 2s, one at or above it at 2(2^bits - s) - 1, so the last listed is the
// largest present symbol below 2^(bits-1) or the smallest one at or above it.
struct ListEnd {
  uint32_t last = 0;
  size_t last_i = 0;
  ListEnd(ChannelKind kind, const Present& p, int bits) {
    if (p.n == 0) return;
    if (kind != ChannelKind::delta_table) {
      last_i = p.n - 1;
      last = p.sym[last_i];
      return;
    }
    const uint32_t half = 1u << (bits - 1);
    size_t k = 0;  // present symbols below half (a loop the compiler vectorises)
    for (size_t i = 0; i < p.n; ++i) k += p.sym[i] < half;
    const uint32_t below = k > 0 ? 2u * p.sym[k - 1] : 0;
    const uint32_t above = k < p.n ? 2u * ((2u << (bits - 1)) - p.sym[k]) - 1 : 0;
    if (k == p.n || (k > 0 && below > above)) {
      last_i = k - 1;
      last = below;
    } else {
      last_i = k;
      last = above;
    }
  }
};

void fill_cum(ChannelTable& table) {
  static_assert(kMaxPrecision < 16, "a table's partial sums must fit 16-bit lanes");
  // Tables of 32 symbols and more four frequencies a step in a 64-bit word (every partial sum
  // <= 2^12 fits its 16-bit lane): one add a symbol was 7% of reading 8-bit tables, 5% of 5-6
  // bit ones. (Small tables one at a time: the words' carry chain is longer than their adds.)
  const size_t n = table.freq.size();
  table.cum.resize(n);
  const uint16_t* const f = table.freq.data();
  uint16_t* const cum = table.cum.data();
  size_t s = 0;
  uint64_t carry = 0;  // the sum so far, in every lane
  if (std::endian::native == std::endian::little && n >= 32) {
    for (; s + 4 <= n; s += 4) {
      uint64_t w;
      std::memcpy(&w, f + s, 8);
      uint64_t inclusive = w + (w << 16);
      inclusive += inclusive << 32;
      const uint64_t exclusive = inclusive - w + carry;
      std::memcpy(cum + s, &exclusive, 8);
      carry += (inclusive >> 48) * 0x0001000100010001ull;
    }
  }
  uint32_t c = static_cast<uint32_t>(carry & 0xffff);
  for (; s < n; ++s) {
    cum[s] = static_cast<uint16_t>(c);
    c += f[s];
  }
}

// Exp-Golomb bits of a frequency f <= 2^kMaxPrecision (the table's index) at orders 0..3, packed as
// four 16-bit fields (order k at bits 16k): a frequency list's cost at every order is then one load
// and one add per entry (four bit-length computations per entry were 80% of the search). A field
// sums at most 256 entries of <= 25 bits: no carry into the next.
const uint64_t* eg_bits_packed_table() {
  static_assert(1 << kEgOrderBits == 4 && (256 * 25) < (1 << 16));
  struct Table {
    uint64_t v[kMaxLog2Table + 1];
    Table() {
      for (uint32_t i = 0; i <= kMaxLog2Table; ++i) {
        v[i] = 0;
        for (int k = 0; k < 4; ++k)
          v[i] |= static_cast<uint64_t>(BitWriter::exp_golomb_bits(i, k)) << (16 * k);
      }
    }
  };
  static const Table table;
  return table.v;
}

// Best table over one histogram: precision t and Exp-Golomb order k. The frequency list's
// bits are counted for every order in one pass per precision (the list ends at the last
// present symbol in list order, the same at every precision).
struct TableChoice {
  uint64_t cost_fp = UINT64_MAX;
  int t = 0, eg_k = 0;  // t = 0: no table (none beats the caller's best)
};
// data_bound is at most the data cost of any table over the counts (table_cost_bound's): the
// search stops where no higher precision can cost less than the best so far. After precision s
// (frequencies f, n present symbols, `ones` of them at 1), every higher precision t has
// f_t >= 2 f - 1 for each symbol but the most frequent one, and f_t >= 2 f - 2d - 1 - e for
// that one, when 2 f_most >= 2d + 2 + e, d = floor(n / 2), e = floor((n + ones) / 2): its list
// costs at least that at every order (Exp-Golomb lengths grow with the value). Why, with
// x = c 2^t / N and q = max(1, floor(x + h / N)), h = floor(N / 2):
// - q_{t+1} >= 2 q_t - 1 (2x + h/N falls at most 1 below twice x + h/N), so q never falls;
// - a rounded q is at most 1/2 above x, a raised one (from 0) at most 1, and no more are raised
//   at t than at s (they have f = 1 there; the most frequent never is): normalize takes at
//   most e; rounding down loses less than 1/2 + 1/(2N) each, so it gives at most d;
// - so q_most(t) >= 2 q_most(s) - 1 >= 2 (f_most - d) - 1 >= e + 1 holds every take: the others
//   keep q_t >= 2 q_s - 1 >= 2 f - 1, the most frequent one q_t - e.
//
// Only a table that costs less than `beat` is returned (t = 0 when none does): the caller's
// best so far prunes too. winner (optional, 256 entries): the returned table's frequencies, by
// present symbol (ascending), written when there is one.
TableChoice best_table_choice(const Present& present, const ListEnd& end, size_t n_rows, int bits,
                              uint64_t data_bound, uint64_t beat, uint16_t* winner) {
  TableChoice best;
  best.cost_fp = beat;
  const Shares shares(present);
  // The list holds every present symbol but the last one listed (at place `last`, present
  // index last_i), and last + 1 - n absent ones (frequency 0): its cost is a sum over present
  // symbols, taken in the data cost's loop.
  const uint32_t last = end.last;
  const size_t last_i = end.last_i;
  const uint32_t* const log2_of = log2_fixed_table();
  const uint64_t* const eg_bits = eg_bits_packed_table();
  const uint64_t absent_list = present.n ? (last + 1 - present.n) * eg_bits[0] : 0;
  // A table's description bits with a packed list coded at order k, and the least over k.
  const auto desc_at = [bits](uint64_t list, int k) {
    return kKindBits + kPrecisionBits + kEgOrderBits + static_cast<uint64_t>(bits) +
           ((list >> (16 * k)) & 0xffff);
  };
  const auto least_desc = [&](uint64_t list) {
    uint64_t least = UINT64_MAX;
    for (int k = 0; k < (1 << kEgOrderBits); ++k) least = std::min(least, desc_at(list, k));
    return least;
  };
  uint16_t f[256];  // by present index
  // Taken once: as the loop's bound it was an out-of-line call per step.
  const int max_t = max_table_precision(n_rows);
  const auto consider = [&](uint64_t list, uint64_t data, int t) {
    for (int k = 0; k < (1 << kEgOrderBits); ++k) {
      const uint64_t cost = (desc_at(list, k) << 16) + data;
      if (cost < best.cost_fp) best = TableChoice{cost, t, k};
    }
  };
  for (int t = 1; t <= max_t; ++t) {
    if (present.n > (size_t{1} << t)) continue;  // normalize's refusal
    // sum of c * (t - log2 f) = t * total - sum of c * log2 f (each term is >= 0: f <= 2^t)
    uint64_t data = (static_cast<uint64_t>(t) * present.total) << 16;
    // Counts totalling 2^t are their own frequencies at t (normalize rounds nothing), and at
    // every higher precision u exactly c * 2^(u - t): the same data cost (log2_fixed(2v) is
    // log2_fixed(v) + 2^16) and a list no shorter at any order (Exp-Golomb lengths grow with
    // the value), so none of them can cost less: the search ends after t. (Chunks of 256 rows
    // at 5-6 bits searched 2^9 too.)
    const bool last_needed = present.total == (uint64_t{1} << t);
    if (present.n == (size_t{1} << t)) {  // every frequency 1, the only table: no pass needed
      consider(absent_list + (present.n - 1) * eg_bits[1], data, t);
      if (winner && best.t == t) std::fill(winner, winner + present.n, uint16_t{1});
      if (last_needed) break;
      continue;
    }
    normalize(present, shares, t, f);
    uint64_t list = absent_list;  // the list's bits at each order, packed as eg_bits_packed's
    uint32_t ones = 0;
    for (size_t i = 0; i < present.n; ++i) {
      data -= static_cast<uint64_t>(present.count[i]) * log2_of[f[i]];
      list += eg_bits[f[i]];
      ones += f[i] == 1;
    }
    if (present.n) list -= eg_bits[f[last_i]];
    consider(list, data, t);
    if (winner && best.t == t) {
      // 16 bytes at a time (f and winner hold 256): a copy of the runtime length became a
      // `rep movs`, whose start-up was 14% of this search on 3-bit codes.
      for (size_t i = 0; i < present.n; i += 8) std::memcpy(winner + i, f + i, 16);
    }
    if (last_needed) break;
    // The bound on every higher precision (their frequencies < 2^12: within the table).
    const uint32_t n = static_cast<uint32_t>(present.n), d = n / 2, e = (n + ones) / 2;
    const uint32_t most = f[present.most];
    if (t == max_t || 2 * most < 2 * d + 2 + e) continue;
    const auto next = [&](size_t i) {
      return eg_bits[i == present.most ? 2 * most - 2 * d - 1 - e : 2u * f[i] - 1];
    };
    uint64_t bound = absent_list;
    for (size_t i = 0; i < present.n; ++i) bound += next(i);
    bound -= next(last_i);
    if ((least_desc(bound) << 16) + data_bound >= best.cost_fp) break;
  }
  return best;
}

// The chosen table itself into m: f holds its frequencies by present symbol (ascending).
void table_model(ChannelKind kind, const TableChoice& choice, const Present& p, size_t n_syms,
                 const uint16_t* f, ChannelModel& m) {
  m.kind = kind;
  m.constant_symbol = 0;
  m.cost_fp = choice.cost_fp;
  m.eg_k = choice.eg_k;
  m.table.t = choice.t;
  m.table.freq.clear();
  if (choice.t != 0) {
    m.table.freq.assign(n_syms, 0);
    for (size_t i = 0; i < p.n; ++i) m.table.freq[p.sym[i]] = f[i];
  }
  fill_cum(m.table);
}

// A lower bound on best_table_choice(p, end, n_rows, bits, ...).cost_fp, at a fraction of
// its cost, as description bits and data cost (the data part bounds every table's: the search
// stops on it).
// Data: every table's frequencies f / 2^t form a distribution q, and log2_fixed(f) never
// exceeds 2^16 * log2(f) (checked for every f <= 2^16), so a table's data cost is at least
// 2^16 times the cross-entropy sum c * -log2 q(s) >= the empirical entropy N * H(counts)
// (Gibbs' inequality). The entropy is computed in double, less a margin far above its
// rounding error. Description: the fixed fields and `bits`, and per listed frequency before
// the last at least 2 bits for a present symbol (its frequency is >= 1, and an Exp-Golomb
// code of v >= 1 takes >= 2 bits) and 1 for an absent one.
struct CostBound {
  uint64_t desc_bits = 0, data_fp = 0;
  uint64_t cost_fp() const { return (desc_bits << 16) + data_fp; }
};
// The bound of a histogram of n present symbols totalling `total`, sum_clog the sum of c log2 c
// over its counts, its last present symbol listed at place `last` (clog: the table's pointer,
// fetched once by the caller).
CostBound table_cost_bound(const double* clog, double sum_clog, uint64_t total, size_t n,
                           uint32_t last, int bits) {
  // The list's entries before the last present one (in list order) are the other present
  // ones (2 bits each) and absent ones (1 bit each).
  const uint64_t desc = kKindBits + kPrecisionBits + kEgOrderBits + static_cast<uint64_t>(bits) +
                        (n ? last + (n - 1) : 0);
  const double entropy_fp = (count_log2_count(clog, total) - sum_clog) * 65536.0;
  const double margin = entropy_fp * 1e-9 + 1024.0;
  return {desc, entropy_fp > margin ? static_cast<uint64_t>(entropy_fp - margin) : 0};
}
// Four partial sums, here and below: one was a chain of dependent additions. (The order of the
// additions moves the result by rounding only, far inside the margin above.)
CostBound table_cost_bound(const Present& p, const ListEnd& end, int bits) {
  const double* const clog = count_log2_count_table();
  double part[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= p.n; i += 4) {
    for (size_t k = 0; k < 4; ++k) part[k] += count_log2_count(clog, p.count[i + k]);
  }
  for (size_t k = 0; i < p.n; ++i, ++k) part[k] += count_log2_count(clog, p.count[i]);
  return table_cost_bound(clog, (part[0] + part[1]) + (part[2] + part[3]), p.total, p.n, end.last,
                          bits);
}
// One kind's bound parts of channels' counts (the estimates' bound, taken for every channel of
// every head, needs no Present). Without a branch on zero counts (c log c of 0 is 0): wide
// alphabets' absent symbols mispredicted. Unrolled by hand: indexed by s & 3, the partial sums
// stayed in memory, each addition waiting on the store before it. Taken for a block of channels
// at a time: per channel, fetching the tables and a separate pass counting the present symbols
// had cost as much again.
// 3-bit codes' channels eight at a time on AVX-512 (bound_parts8_avx512, the same sums), as
// long as their counts lie within the c log c table: 22% fewer samples than the loop below
// (which was 3-5% of a .cgkv file encode) on a Zen 4 VM, whose gathers (one a symbol) are slow.
void bound_parts(const uint32_t* counts, size_t n_channels, int bits, bool delta,
                 BoundParts* parts) {
  const size_t n_syms = size_t{1} << bits;
  const double* const clog = count_log2_count_table();
  const uint16_t* const order =
      list_order(delta ? ChannelKind::delta_table : ChannelKind::raw_table, bits);
  size_t ch = 0;
  if (n_syms == 8 && simd_path() == SimdPath::avx512) {
    uint8_t place[8];  // each symbol's list place
    for (uint8_t j = 0; j < 8; ++j) place[order[j]] = j;
    for (; ch + 8 <= n_channels; ch += 8, counts += 64)
      if (!bound_parts8_avx512(counts, clog, place, parts + ch)) break;
  }
  for (; ch < n_channels; ++ch, counts += n_syms) {
    uint64_t total = 0;
    uint32_t n = 0;  // locals: through `parts` they were stores that counts may alias
    double part[4] = {0, 0, 0, 0};
    const auto add = [&](double& sum, uint32_t c) {
      total += c;
      sum += count_log2_count(clog, c);
      n += c != 0;
    };
    size_t s = 0;
    for (; s + 4 <= n_syms; s += 4) {
      add(part[0], counts[s]);
      add(part[1], counts[s + 1]);
      add(part[2], counts[s + 2]);
      add(part[3], counts[s + 3]);
    }
    for (; s < n_syms; ++s) add(part[s & 3], counts[s]);
    uint32_t end = static_cast<uint32_t>(n_syms);  // one past the last present one
    while (end > 0 && counts[order[end - 1]] == 0) --end;
    parts[ch] = BoundParts{(part[0] + part[1]) + (part[2] + part[3]), total, n, end ? end - 1 : 0};
  }
}

}  // namespace

const double* count_log2_count_table() {
  struct Table {
    double v[kClogTable];
    Table() {
      v[0] = 0;
      for (uint32_t i = 1; i < kClogTable; ++i) v[i] = i * std::log2(static_cast<double>(i));
    }
  };
  static const Table table;
  return table.v;
}

int max_table_precision(size_t n_rows) {
  int lg = 0;
  while (lg < 12 && (size_t{1} << lg) < n_rows) ++lg;
  const int t = lg + 1;
  return t > kMaxPrecision ? kMaxPrecision : t;
}

uint32_t log2_fixed(uint32_t v) {
  return v <= kMaxLog2Table ? log2_fixed_table()[v] : log2_fixed_compute(v);
}

namespace {

// The search of choose_channel_model: the winning kind and, for table kinds, its table's
// choice (the first of equal costs wins) and the histogram's present symbols it lists.
struct ModelChoice {
  ChannelKind kind = ChannelKind::uniform;
  uint64_t cost_fp = 0;
  TableChoice table;
  uint8_t constant_symbol = 0;
  const Present* present = nullptr;
};
// One channel's histograms as the search reads them; delta's only where raw's has two symbols.
struct ChannelCounts {
  Present raw, delta;
  ChannelCounts(std::span<const uint32_t> raw_counts, std::span<const uint32_t> delta_counts)
      : raw(raw_counts), delta(raw.n > 1 ? delta_counts : std::span<const uint32_t>{}) {}
};
// winner (optional): the chosen table's frequencies, as best_table_choice leaves them.
ModelChoice search_channel_model(const ChannelCounts& counts, bool delta_allowed, size_t n_rows,
                                 int bits, uint16_t* winner = nullptr) {
  ModelChoice best;
  if (counts.raw.n <= 1) {
    best.kind = ChannelKind::constant;
    best.constant_symbol = static_cast<uint8_t>(counts.raw.n ? counts.raw.sym[0] : 0);
    best.cost_fp = static_cast<uint64_t>(kKindBits + bits) << 16;
    return best;
  }
  best.kind = ChannelKind::uniform;
  best.cost_fp = static_cast<uint64_t>(kKindBits + n_rows * bits) << 16;
  // A table kind whose lower bound is not below the best so far cannot win: its search is
  // skipped, with the same choice.
  const auto try_table = [&](ChannelKind kind, const Present& p) {
    const ListEnd end(kind, p, bits);
    const CostBound bound = table_cost_bound(p, end, bits);
    if (bound.cost_fp() >= best.cost_fp) return;
    const TableChoice table =
        best_table_choice(p, end, n_rows, bits, bound.data_fp, best.cost_fp, winner);
    if (table.t != 0) best = ModelChoice{kind, table.cost_fp, table, 0, &p};
  };
  try_table(ChannelKind::raw_table, counts.raw);
  if (delta_allowed) try_table(ChannelKind::delta_table, counts.delta);
  return best;
}

}  // namespace

void choose_channel_model(std::span<const uint32_t> raw_counts,
                          std::span<const uint32_t> delta_counts, size_t n_rows, int bits,
                          ChannelModel& model) {
  const size_t n_syms = size_t{1} << bits;
  uint16_t winner[256];
  const ChannelCounts counts(raw_counts, delta_counts);
  const ModelChoice choice =
      search_channel_model(counts, !delta_counts.empty(), n_rows, bits, winner);
  if (choice.present) {
    return table_model(choice.kind, choice.table, *choice.present, n_syms, winner, model);
  }
  // The coder's view of the non-table kinds.
  model.kind = choice.kind;
  model.cost_fp = choice.cost_fp;
  model.eg_k = 0;
  model.constant_symbol = 0;
  if (model.kind == ChannelKind::constant) {
    model.constant_symbol = choice.constant_symbol;
    model.table.t = 0;
    model.table.freq.assign(n_syms, 0);
    model.table.freq[model.constant_symbol] = 1;
  } else {
    model.table.t = bits;
    model.table.freq.assign(n_syms, 1);
  }
  fill_cum(model.table);
}

ChannelModel choose_channel_model(std::span<const uint32_t> raw_counts,
                                  std::span<const uint32_t> delta_counts, size_t n_rows, int bits) {
  ChannelModel model;
  choose_channel_model(raw_counts, delta_counts, n_rows, bits, model);
  return model;
}

uint64_t channel_model_cost(std::span<const uint32_t> raw_counts,
                            std::span<const uint32_t> delta_counts, size_t n_rows, int bits) {
  const ChannelCounts counts(raw_counts, delta_counts);
  return search_channel_model(counts, !delta_counts.empty(), n_rows, bits).cost_fp;
}

void channel_cost_lower_bounds(const uint32_t* raw_counts, const uint32_t* delta_counts,
                               size_t n_channels, size_t n_rows, int bits, uint64_t* bounds) {
  const size_t n_syms = size_t{1} << bits;
  const uint64_t constant = static_cast<uint64_t>(kKindBits + bits) << 16;  // exact
  const uint64_t uniform = static_cast<uint64_t>(kKindBits + n_rows * bits) << 16;
  const double* const clog = count_log2_count_table();
  const auto cost = [clog, bits](const BoundParts& p) {
    return table_cost_bound(clog, p.sum_clog, p.total, p.n, p.last, bits).cost_fp();
  };
  constexpr size_t kBlock = 64;
  BoundParts raw[kBlock], delta[kBlock];
  for (size_t c0 = 0; c0 < n_channels; c0 += kBlock) {
    const size_t m = std::min(kBlock, n_channels - c0);
    bound_parts(raw_counts + c0 * n_syms, m, bits, false, raw);
    if (delta_counts != nullptr) bound_parts(delta_counts + c0 * n_syms, m, bits, true, delta);
    for (size_t c = 0; c < m; ++c) {
      uint64_t bound = std::min(uniform, cost(raw[c]));
      if (delta_counts != nullptr) bound = std::min(bound, cost(delta[c]));
      bounds[c0 + c] = raw[c].n <= 1 ? constant : bound;
    }
  }
}

uint64_t channel_cost_lower_bound(std::span<const uint32_t> raw_counts,
                                  std::span<const uint32_t> delta_counts, size_t n_rows, int bits) {
  uint64_t bound = 0;
  channel_cost_lower_bounds(raw_counts.data(), delta_counts.empty() ? nullptr : delta_counts.data(),
                            1, n_rows, bits, &bound);
  return bound;
}

void write_channel_model(BitWriter& w, const ChannelModel& model, int bits) {
  w.put(static_cast<uint64_t>(model.kind), kKindBits);
  if (model.kind == ChannelKind::constant) {
    w.put(model.constant_symbol, bits);
    return;
  }
  if (model.kind == ChannelKind::uniform) return;
  w.put(static_cast<uint64_t>(model.table.t - 1), kPrecisionBits);
  w.put(static_cast<uint64_t>(model.eg_k), kEgOrderBits);
  const auto& freq = model.table.freq;
  const uint16_t* const order = list_order(model.kind, bits);
  uint32_t last = 0;
  for (uint32_t j = 0; j < freq.size(); ++j)
    if (freq[order[j]] != 0) last = j;
  w.put(last, bits);
  uint16_t list[256];
  for (uint32_t j = 0; j < last; ++j) list[j] = freq[order[j]];
  w.exp_golomb_list(list, last, model.eg_k);
}

void read_channel_model(BitReader& r, int bits, size_t n_rows, ChannelModel& model) {
  model.constant_symbol = 0;
  model.eg_k = 0;
  model.cost_fp = 0;
  const size_t n_syms = size_t{1} << bits;
  model.kind = static_cast<ChannelKind>(r.get(kKindBits, "channel model kind"));
  if (model.kind == ChannelKind::constant) {
    model.constant_symbol = static_cast<uint8_t>(r.get(bits, "constant channel symbol"));
    model.table.t = 0;
    model.table.freq.assign(n_syms, 0);
    model.table.freq[model.constant_symbol] = 1;
  } else if (model.kind == ChannelKind::uniform) {
    model.table.t = bits;
    model.table.freq.assign(n_syms, 1);
  } else {
    const int t = static_cast<int>(r.get(kPrecisionBits, "table precision")) + 1;
    if (t > max_table_precision(n_rows)) {
      fail(ErrorCode::corrupt_input, "codec stream: table precision " + std::to_string(t) +
                                         " exceeds the limit " +
                                         std::to_string(max_table_precision(n_rows)) + " for " +
                                         std::to_string(n_rows) + " rows");
    }
    model.eg_k = static_cast<int>(r.get(kEgOrderBits, "table Exp-Golomb order"));
    model.table.t = t;
    model.table.freq.assign(n_syms, 0);
    const uint32_t last = static_cast<uint32_t>(r.get(bits, "table last index"));
    const uint64_t target = uint64_t{1} << t;
    uint64_t sum = 0;
    // The frequencies several per load (reading them one by one was most of a 6-bit level's
    // model parsing), checked in order after each run: the errors are those of reading and
    // checking one at a time.
    const uint16_t* const order = list_order(model.kind, bits);
    const int ks[2] = {model.eg_k, model.eg_k};
    uint64_t f[256];  // last < 2^bits <= 256
    for (uint32_t j = 0; j < last;) {
      size_t got = r.exp_golomb_run(f + j, last - j, ks);
      if (got == 0) {  // a long code, or the input's end near
        f[j] = r.exp_golomb(model.eg_k, "table frequency");
        got = 1;
      }
      for (const uint32_t end = j + static_cast<uint32_t>(got); j < end; ++j) {
        sum += f[j];
        if (sum >= target) {
          fail(ErrorCode::corrupt_input, "codec stream: table frequencies reach 2^" +
                                             std::to_string(t) + " before the last symbol");
        }
        model.table.freq[order[j]] = static_cast<uint16_t>(f[j]);
      }
    }
    model.table.freq[order[last]] = static_cast<uint16_t>(target - sum);
  }
  fill_cum(model.table);
}

}  // namespace cachegen::detail
