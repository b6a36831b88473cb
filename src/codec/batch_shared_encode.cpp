// The shared-model batch's encoder (layout 1, or 2 with one model for every channel;
// docs/FORMAT.md): its heads counted, the models and layout chosen (SharedEncoder::plan), the
// slices coded on the pool's threads, then written. The decoders are in batch_shared.cpp.
#include <algorithm>
#include <array>
#include <atomic>
#include <string>

#include "cachegen/runtime.h"
#include "codec/rans.h"
#include "codec/rans_lane_pattern.h"
#include "codec/scratch.h"
#include "codec/stream_format.h"
#include "codec/token_delta_transform.h"
#include "core/parallel.h"
#include "quant/kernels.h"

namespace cachegen::detail {
namespace {

// Elements per slice the encoder aims for (32 lanes from here on, see choose_lanes).
constexpr size_t kSliceElements = 16384;
// The largest batch (codes) whose delta symbols the encoder keeps from its counts to its
// payloads (encode_batch_shared): well inside a core's L2.
constexpr size_t kKeptDeltaBytes = size_t{256} << 10;
// Heads per slice of a shared batch of G heads of n elements: slices of about kSliceElements, or
// up to twice that where equal slices then come in a multiple of eight (or else of four) —
// decoders take them four at a time in lockstep, and two threads one quad each (40 heads of
// 4,096 as 8 slices of 5 heads, not 10 of 4: the threads' runs were a quad and a single slice).
size_t slice_heads(size_t G, size_t n) {
  const size_t base = std::min(G, std::max<size_t>(1, (kSliceElements + n - 1) / n));
  for (size_t multiple : {size_t{8}, size_t{4}}) {
    for (size_t h = base; h <= 2 * base && h <= G; ++h)
      if (G % h == 0 && (G / h) % multiple == 0) return h;
  }
  return base;
}

// Bytes of models (and data) whose costs sum to `fp` bits in 16.16 fixed point.
uint64_t fp_bytes(uint64_t fp) {
  return ((fp >> 16) + 7) / 8;
}

uint64_t model_cost_fp(std::span<const ChannelModel> models) {
  uint64_t fp = 0;
  for (const auto& m : models) fp += m.cost_fp;
  return fp;
}

// Into `models`, reusing their storage.
void choose_models(const uint32_t* raw, const uint32_t* delta, size_t dim, size_t n_syms,
                   size_t n_rows, int bits, std::vector<ChannelModel>& models) {
  models.resize(dim);
  for (size_t c = 0; c < dim; ++c) {
    choose_channel_model(
        std::span<const uint32_t>(raw + c * n_syms, n_syms),
        delta ? std::span<const uint32_t>(delta + c * n_syms, n_syms) : std::span<const uint32_t>(),
        n_rows, bits, models[c]);
  }
}

// A shared batch being encoded: planned (its heads counted, its models chosen, the layout
// decided), its slices coded (on any threads), then written. Its buffers are kept from batch to
// batch (fresh ones page-faulted on every batch; a few allocations per channel were ~8% of a
// file encode's short batches): two per thread (thread_encoder), for two batches at once.
class SharedEncoder {
 public:
  // False where the heads cannot or should not share (encode_batch_shared): nothing to slice
  // or write then.
  bool plan(std::span<const CodeStream> streams, std::span<const ParamPrecision> precisions,
            const EncodeOptions& options, std::span<const CompactSection> compact_sections);
  size_t n_slices() const { return n_slices_; }
  int slice_lanes(size_t i) const { return choose_lanes(slice_heads_of(i) * n_, wide_from_); }
  // The coder's work estimate a slice (parallel_for_work), this machine's (Zen 4, 2.6 GHz):
  // ~0.33 ns a code.
  double slice_ns() const { return 0.33 * static_cast<double>(heads_per_slice_ * n_); }
  // Slice i's symbols (in `slot` of this thread's scratch, or its codes in place) and its heads'
  // parameter blocks made: its rANS payload's job.
  RansJob slice(size_t i, Scratch slot);
  // The batch after the layout byte, which `out` ends with (batch_start), set to the layout.
  void write(std::vector<uint8_t>& out);

 private:
  // Independent records' estimated bytes with models of `model_fp` bits (16.16 fixed point).
  uint64_t record_bytes(uint64_t model_fp) const {
    return fp_bytes(model_fp) + 4 * static_cast<uint64_t>(choose_lanes(n_, wide_from_)) + 8;
  }
  bool independent_at_least(uint64_t shared, uint64_t independent, bool allow_delta);
  // The plan's end: models_ (every channel's one_ for layout 2) made the channels' tables.
  void take_one_model();
  void take_models();
  size_t slice_heads_of(size_t i) const {
    return std::min(G_, (i + 1) * heads_per_slice_) - i * heads_per_slice_;
  }
  std::span<const uint8_t> section_of(size_t h) const {
    return compact_sections_.empty() ? std::span<const uint8_t>()
                                     : std::span<const uint8_t>(compact_sections_[h].bytes);
  }
  // A head's parameter block is its compact section behind three bytes where the precision
  // choice left one: copied into the output by write(). The others are written by each
  // slice's task (writing compact parameters is otherwise the largest serial part of the
  // batch) into kept blocks (a fresh vector per head, grown byte by byte, was 200 of a
  // stories260K batch's 235 allocations: 4% of its encode on 1 thread, 7% on 2).
  bool block_written(size_t h) const {
    return precisions_[h] != ParamPrecision::compact || section_of(h).empty();
  }

  std::span<const CodeStream> streams_;
  std::span<const ParamPrecision> precisions_;
  std::span<const CompactSection> compact_sections_;
  CompactGrid grid_;
  size_t G_ = 0, n_ = 0, dim_ = 0, heads_per_slice_ = 0, n_slices_ = 0;
  size_t wide_from_ = 0;  // EncodeOptions::wide_lanes_from
  int bits_ = 0, precision_ = 0;
  bool any_delta_ = false, codes_in_place_ = false;
  uint8_t* kept_ = nullptr;  // head h's delta symbols at h * n_, or null (not kept)
  std::vector<uint8_t> kept_delta_;
  std::vector<std::vector<uint32_t>> raw_counts_, delta_counts_;
  // The heads' counts summed: raw and delta per channel, then over every channel.
  std::vector<uint32_t> pooled_[4];
  std::vector<uint64_t> head_cost_, head_fp_, channel_bound_, pooled_bound_;
  std::vector<uint64_t> order_;                  // independent_at_least's channels, as sort keys
  std::vector<std::atomic<uint64_t>> exact_fp_;  // its heads' sums
  std::vector<ChannelModel> models_;
  ChannelModel one_;  // the pooled model (layout 2)
  bool one_model_ = false;
  std::vector<ChannelTable> tables_;
  RansWideTables wide_;  // tables_' AVX2 encoder tables, where wide_used_
  bool wide_used_ = false;
  std::vector<std::vector<uint8_t>> payloads_, param_blocks_;
  std::vector<uint8_t> side_;  // the models' bits
};

SharedEncoder& thread_encoder(int which) {
  thread_local SharedEncoder encoders[2];
  return encoders[which];
}

bool SharedEncoder::plan(std::span<const CodeStream> streams,
                         std::span<const ParamPrecision> precisions, const EncodeOptions& options,
                         std::span<const CompactSection> compact_sections) {
  const size_t G = streams.size();
  // One head shares a batch only with one model (layout 2); with a model per channel it is a
  // head record.
  if (G == 0 || (G == 1 && !options.allow_one_model)) return false;
  const CodeStream& first = streams[0];
  for (const auto& s : streams) {
    if (s.n_rows != first.n_rows || s.dim != first.dim || s.bits != first.bits ||
        s.group_size != first.group_size)
      return false;
  }
  const size_t n = first.n_rows * first.dim, dim = first.dim;
  if (n == 0) return false;
  streams_ = streams;
  precisions_ = precisions;
  compact_sections_ = compact_sections;
  grid_ = CompactGrid{options.scale_mantissa_bits, options.zero_step_log2};
  G_ = G;
  n_ = n;
  dim_ = dim;
  bits_ = first.bits;
  wide_from_ = options.wide_lanes_from;
  const size_t n_syms = size_t{1} << first.bits;
  const bool allow_delta = options.allow_delta;
  // Per head: histograms of its codes and of their delta symbols, and the lower bound of its
  // record's estimate. The delta symbols of a batch up to kKeptDeltaBytes are kept for the
  // payloads below; a larger batch's are made in each thread's scratch, counted and dropped,
  // and made again where channels code them (the synthetic set's 8 MiB, kept, were written out
  // of cache: made again instead, its encode of codes is ~10% faster; stories260K's 5% slower).
  const bool keep_delta = allow_delta && G * n <= kKeptDeltaBytes;
  if (keep_delta && kept_delta_.size() < G * n) kept_delta_.resize(G * n);
  uint8_t* const kept = kept_ = keep_delta ? kept_delta_.data() : nullptr;
  std::vector<std::vector<uint32_t>>& raw_counts = raw_counts_;
  std::vector<std::vector<uint32_t>>& delta_counts = delta_counts_;
  if (raw_counts.size() < G) raw_counts.resize(G), delta_counts.resize(G);
  std::vector<uint64_t>& head_cost = head_cost_;
  std::vector<uint64_t>& head_fp = head_fp_;
  std::vector<uint64_t>& channel_bound = channel_bound_;
  head_cost.assign(G, 0);
  head_fp.assign(G, 0);
  channel_bound.assign(G * dim, 0);
  // The loops' work estimates (parallel_for_work) are this machine's (Zen 4, 2.6 GHz): the
  // counts ~0.11 ns a code, an exact estimate ~4 ns a symbol.
  const auto histograms = quant_kernels().channel_histograms;
  parallel_for_work(G, 0.11 * static_cast<double>(n), [&](size_t h) {
    const CodeStream& s = streams[h];
    raw_counts[h].assign(dim * n_syms, 0);
    histograms(s.codes.data(), s.n_rows, dim, n_syms, raw_counts[h].data());
    if (allow_delta) {
      // Every byte written below.
      uint8_t* const delta = keep_delta ? kept + h * n : scratch_bytes(n, Scratch::delta);
      compute_delta_symbols(s.codes.data(), s.n_rows, dim, s.bits, s.group_size, s.scale, s.zero,
                            delta);
      delta_counts[h].assign(dim * n_syms, 0);
      histograms(delta, s.n_rows, dim, n_syms, delta_counts[h].data());
    }
    channel_cost_lower_bounds(raw_counts[h].data(), allow_delta ? delta_counts[h].data() : nullptr,
                              dim, s.n_rows, s.bits, channel_bound.data() + h * dim);
    uint64_t fp = 0;
    for (size_t c = 0; c < dim; ++c) fp += channel_bound[h * dim + c];
    head_fp[h] = fp;
    head_cost[h] = record_bytes(fp);
  });
  // Shared (kept vectors, as the heads' counts: a fresh one each was 4 of a stories260K
  // batch's allocations).
  std::vector<uint32_t>& raw = pooled_[0];
  std::vector<uint32_t>& del = pooled_[1];
  raw.assign(dim * n_syms, 0);
  del.assign(allow_delta ? dim * n_syms : 0, 0);
  for (size_t h = 0; h < G; ++h) {
    for (size_t i = 0; i < raw.size(); ++i) raw[i] += raw_counts[h][i];
    for (size_t i = 0; i < del.size(); ++i) del[i] += delta_counts[h][i];
  }
  const size_t total_rows = G * first.n_rows;
  heads_per_slice_ = slice_heads(G, n);
  n_slices_ = (G + heads_per_slice_ - 1) / heads_per_slice_;
  uint64_t framing = 4;  // coder precision and the models' length, then the slice table
  for (size_t i = 0; i < n_slices_; ++i) framing += 4 * static_cast<uint64_t>(slice_lanes(i)) + 4;
  uint64_t independent = 0;
  for (uint64_t c : head_cost) independent += c;
  // One model for every channel (layout 2): the channels' counts pooled. Where it is no larger
  // than the lower bounds of both the other layouts, it is taken without their model searches
  // (a .cgkv chunk's 3-bit tensors: per-channel tables of a few hundred symbols each cost more
  // than the channels' differences save).
  one_model_ = false;
  uint64_t one = UINT64_MAX;
  if (options.allow_one_model) {
    std::vector<uint32_t>& raw_all = pooled_[2];
    std::vector<uint32_t>& del_all = pooled_[3];
    raw_all.assign(n_syms, 0);
    del_all.assign(allow_delta ? n_syms : 0, 0);
    for (size_t c = 0; c < dim; ++c) {
      for (size_t v = 0; v < n_syms; ++v) raw_all[v] += raw[c * n_syms + v];
      for (size_t v = 0; v < del_all.size(); ++v) del_all[v] += del[c * n_syms + v];
    }
    choose_channel_model(raw_all, del_all, G * n, first.bits, one_);
    one = fp_bytes(one_.cost_fp) + framing;
    if (G == 1) {  // a head record otherwise
      if (one > independent) return false;
      take_one_model();
      return true;
    }
    uint64_t per_channel_bound = 0;
    if (one <= independent) {
      std::vector<uint64_t>& bounds = pooled_bound_;
      bounds.resize(dim);
      channel_cost_lower_bounds(raw.data(), allow_delta ? del.data() : nullptr, dim, total_rows,
                                first.bits, bounds.data());
      for (uint64_t b : bounds) per_channel_bound += b;
    }
    if (one <= independent && one <= fp_bytes(per_channel_bound) + framing) {
      take_one_model();
      return true;
    }
  }
  choose_models(raw.data(), allow_delta ? del.data() : nullptr, dim, n_syms, total_rows, first.bits,
                models_);
  uint64_t shared = fp_bytes(model_cost_fp(models_)) + framing;
  const bool one_smaller = one < shared;
  shared = std::min(shared, one);
  // The independent records' lower bounds settle the choice when the shared batch is no larger
  // than even those (the usual case: the estimate's model search per head and channel was
  // most of the encoder's model search); otherwise independent_at_least searches.
  if (shared > independent && !independent_at_least(shared, independent, allow_delta)) return false;
  if (one_smaller) {
    take_one_model();
  } else {
    take_models();
  }
  return true;
}

// Whether the batch's independent records (models, lane states, ~8 header and framing bytes a
// head) cost at least `shared` bytes, where the sum of their lower bounds, `independent`, is
// less: the bounds become exact estimates channel by channel (cost only: no tables built) until
// their sum reaches `shared` (true; the channels left are skipped) or every channel is exact
// (the estimate decides). Exact estimates only raise the sum, so the outcome does not depend on
// which channels were evaluated, nor on the threads (2-head batches of short chunks, a .cgkv
// file's, often settle after a few). The channels go in ascending order of their bounds: the
// lowest lie furthest below the uniform cost (the same for every channel), which most exact
// estimates reach, so they raise the sum most (tinystories-hd64's level-high file: 1,779
// instead of 2,437 of its 3,072 estimates; in the order of the exact rises themselves, 1,763;
// stories260K's bench batch: 39 of its 320 channels, 36 in that order).
bool SharedEncoder::independent_at_least(uint64_t shared, uint64_t independent, bool allow_delta) {
  const size_t dim = dim_, n_syms = size_t{1} << bits_, m = G_ * dim;
  const size_t n_rows = streams_[0].n_rows;
  // The order as keys bound << kIndexBits | channel, integers sorted a part at a time: the
  // smallest eighth (at least 128) first, the rest only where those did not settle it (a stable
  // sort of all the indices by their bounds, through a comparator, was a quarter of this search
  // on stories260K's bench batch: 3.0 of 11.4 us).
  constexpr int kIndexBits = 24;
  std::vector<uint64_t>& order = order_;
  order.resize(m);
  bool packed = m <= (size_t{1} << kIndexBits);
  for (size_t i = 0; i < m && packed; ++i)
    packed = channel_bound_[i] < (uint64_t{1} << (64 - kIndexBits));
  size_t first = m;
  if (packed) {
    for (size_t i = 0; i < m; ++i) order[i] = channel_bound_[i] << kIndexBits | i;
    first = std::min(m, std::max<size_t>(128, m / 8));
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(first),
                     order.end());
    std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(first));
  } else {  // (bounds of 2^24 bits or more: channels of millions of rows)
    for (size_t i = 0; i < m; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](uint64_t a, uint64_t b) { return channel_bound_[a] < channel_bound_[b]; });
  }
  const uint64_t index_mask = packed ? (uint64_t{1} << kIndexBits) - 1 : UINT64_MAX;
  if (exact_fp_.size() < G_) exact_fp_ = std::vector<std::atomic<uint64_t>>(G_);
  for (size_t h = 0; h < G_; ++h) exact_fp_[h].store(head_fp_[h], std::memory_order_relaxed);
  std::atomic<uint64_t> bound{independent};
  // ~30 ns a symbol an estimate (stories260K's 3-bit channels of 512 rows: ~220 ns).
  const double item_ns = 30.0 * static_cast<double>(n_syms);
  const auto run = [&](size_t begin, size_t end) {
    // The caller takes items from the front and a helper from the back (run_items): on several
    // threads each takes every other channel in ascending order.
    const size_t count = end - begin, half = (count + 1) / 2;
    const bool interleave = threads_for_work(count, item_ns) > 1;
    parallel_for_work(count, item_ns, [&](size_t j) {
      if (bound.load(std::memory_order_relaxed) >= shared) return;
      const size_t at = !interleave ? j : j < half ? 2 * j : 2 * (count - 1 - j) + 1;
      const size_t i = static_cast<size_t>(order[begin + at] & index_mask);
      const size_t h = i / dim, c = i % dim;
      const uint64_t rise =
          channel_model_cost(
              std::span<const uint32_t>(raw_counts_[h].data() + c * n_syms, n_syms),
              allow_delta ? std::span<const uint32_t>(delta_counts_[h].data() + c * n_syms, n_syms)
                          : std::span<const uint32_t>(),
              n_rows, bits_) -
          channel_bound_[i];
      // The head's record estimate from its sum before and after this rise (any order of the
      // rises gives the same final sums).
      const uint64_t before = exact_fp_[h].fetch_add(rise, std::memory_order_relaxed);
      bound.fetch_add(record_bytes(before + rise) - record_bytes(before),
                      std::memory_order_relaxed);
    });
  };
  run(0, first);
  if (bound.load() < shared && first < m) {
    std::sort(order.begin() + static_cast<std::ptrdiff_t>(first), order.end());
    run(first, m);
  }
  return bound.load() >= shared;
}

void SharedEncoder::take_one_model() {
  one_model_ = true;
  models_.resize(dim_);  // copy-assignment reuses their storage
  for (ChannelModel& m : models_) m = one_;
  take_models();
}

void SharedEncoder::take_models() {
  precision_ = 1;
  tables_.resize(dim_);  // copy-assignment reuses their storage
  for (size_t c = 0; c < dim_; ++c) {
    precision_ = std::max(precision_, models_[c].table.t);
    tables_[c] = models_[c].table;
  }
  if (payloads_.size() < n_slices_) payloads_.resize(n_slices_);
  if (param_blocks_.size() < G_) param_blocks_.resize(G_);
  // Where every channel codes its codes, a slice of one head (heads of 16K elements or more)
  // codes them in place: no copy (3% of encoding tinystories-hd64's codes).
  any_delta_ = std::any_of(models_.begin(), models_.end(),
                           [](const auto& m) { return m.kind == ChannelKind::delta_table; });
  codes_in_place_ = heads_per_slice_ == 1 && !any_delta_;
  // The slices' encoder tables made once for all of them (every slice but the last has the
  // first's lanes).
  wide_used_ = false;
  for (size_t i : {size_t{0}, n_slices_ - 1})
    wide_used_ = wide_used_ || rans_wide_tables_used(dim_, size_t{1} << bits_, slice_lanes(i));
  if (wide_used_) wide_.build(tables_, dim_, precision_);
}

RansJob SharedEncoder::slice(size_t i, Scratch slot) {
  const size_t h0 = i * heads_per_slice_, h1 = h0 + slice_heads_of(i), n = n_;
  // Every byte is written by stream_symbols.
  uint8_t* const symbols = codes_in_place_ ? nullptr : scratch_bytes((h1 - h0) * n, slot);
  for (size_t h = h0; h < h1; ++h) {
    if (!codes_in_place_) {
      const CodeStream& s = streams_[h];
      std::span<uint8_t> delta;
      if (any_delta_ && kept_ != nullptr) {
        delta = std::span<uint8_t>(kept_ + h * n, n);
      } else if (any_delta_) {
        delta = std::span<uint8_t>(scratch_bytes(n, Scratch::delta), n);
        compute_delta_symbols(s.codes.data(), s.n_rows, dim_, s.bits, s.group_size, s.scale, s.zero,
                              delta.data());
      }
      stream_symbols(s, models_, delta, symbols + (h - h0) * n);
    }
    if (block_written(h)) {
      param_blocks_[h].clear();
      write_param_block(streams_[h], precisions_[h], grid_, param_blocks_[h], section_of(h));
    }
  }
  return RansJob{std::span<const uint8_t>(codes_in_place_ ? streams_[h0].codes.data() : symbols,
                                          (h1 - h0) * n),
                 dim_,
                 tables_,
                 precision_,
                 slice_lanes(i),
                 &payloads_[i],
                 0,
                 wide_used_ ? &wide_ : nullptr};
}

void SharedEncoder::write(std::vector<uint8_t>& out) {
  out.back() = one_model_ ? kBatchOneModel : kBatchShared;  // the layout byte (batch_start)
  BitWriter bits(std::move(side_));
  if (one_model_) {
    write_channel_model(bits, one_, bits_);
  } else {
    for (const auto& m : models_) write_channel_model(bits, m, bits_);
  }
  side_ = bits.finish();
  const std::vector<uint8_t>& side = side_;
  // The output grows once (each regrowth copied and page-faulted the whole batch again).
  size_t total = out.size() + 64 + side.size() + 12 * n_slices_;
  for (size_t h = 0; h < G_; ++h)
    total += block_written(h) ? param_blocks_[h].size() : 3 + 10 + section_of(h).size();
  for (size_t i = 0; i < n_slices_; ++i) total += payloads_[i].size();
  out.reserve(total);
  wire::Writer w(out);
  const CodeStream& first = streams_[0];
  w.varint(first.n_rows);
  w.varint(dim_);
  w.varint(first.group_size);
  w.u8(static_cast<uint8_t>(bits_));
  for (size_t h = 0; h < G_; ++h) {
    if (block_written(h)) {
      w.bytes(param_blocks_[h]);
    } else {
      write_param_block(streams_[h], precisions_[h], grid_, out, section_of(h));
    }
  }
  w.u8(static_cast<uint8_t>(precision_));
  w.varint(side.size());
  w.bytes(side);
  w.varint(heads_per_slice_);
  for (size_t i = 0; i < n_slices_; ++i) {
    w.u8(static_cast<uint8_t>(slice_lanes(i)));
    w.varint(payloads_[i].size());
  }
  for (size_t i = 0; i < n_slices_; ++i) w.bytes(payloads_[i]);
}

// The planned batch's slices on the pool's threads.
void code_slices(SharedEncoder& e) {
  parallel_for_work(e.n_slices(), e.slice_ns(),
                    [&](size_t i) { rans_encode(e.slice(i, Scratch::symbols)); });
}

}  // namespace

bool encode_batch_shared(std::span<const CodeStream> streams,
                         std::span<const ParamPrecision> precisions, const EncodeOptions& options,
                         std::vector<uint8_t>& out,
                         std::span<const CompactSection> compact_sections) {
  SharedEncoder& e = thread_encoder(0);
  if (!e.plan(streams, precisions, options, compact_sections)) return false;
  code_slices(e);
  e.write(out);
  return true;
}

std::array<bool, 2> encode_batch_shared_pair(std::span<const SharedBatchInput, 2> batches,
                                             const EncodeOptions& options,
                                             std::span<std::vector<uint8_t>* const, 2> out) {
  SharedEncoder* const e[2] = {&thread_encoder(0), &thread_encoder(1)};
  std::array<bool, 2> shared{};
  for (int k = 0; k < 2; ++k) {
    shared[k] =
        e[k]->plan(batches[k].streams, batches[k].precisions, options, batches[k].compact_sections);
  }
  // Two batches of one 8- or 4-lane slice each (a chunk's short K and V): coded in lockstep,
  // or two 4-lane ones as one 8-lane step (rans_encode_pair).
  const auto narrow = [&](int k) {
    return e[k]->slice_lanes(0) == static_cast<int>(kNarrowLanes) || e[k]->slice_lanes(0) == 4;
  };
  if (shared[0] && shared[1] && e[0]->n_slices() == 1 && e[1]->n_slices() == 1 && narrow(0) &&
      narrow(1)) {
    const RansJob a = e[0]->slice(0, Scratch::symbols);
    rans_encode_pair(a, e[1]->slice(0, Scratch::symbols_pair));
  } else {
    for (int k = 0; k < 2; ++k)
      if (shared[k]) code_slices(*e[k]);
  }
  for (int k = 0; k < 2; ++k)
    if (shared[k]) e[k]->write(*out[k]);
  return shared;
}

}  // namespace cachegen::detail
