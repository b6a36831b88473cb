// The shared-model batch (layout 1): G heads of one shape share one model per channel and are
// coded as slices of consecutive heads, each slice one interleaved rANS payload. Sharing
// removes the per-head table tax of short heads, and slices of >= kSliceElements elements
// give SIMD decoders 32 lanes however short a head is, while keeping slices independent so
// that threads decode them in parallel.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
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
// The decoders' work estimates (parallel_for_work), this machine's (Zen 4, 2.6 GHz): a slice's
// codes ~0.35 ns each, decoded and dequantized; compact parameters (scale, zero pairs) ~12 ns
// each (~30 cycles, a serial chain per channel).
constexpr double kDecodeNsPerCode = 0.35;
constexpr double kParamNs = 12;

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

[[noreturn]] void corrupt(const std::string& what) {
  fail(ErrorCode::corrupt_input, "codec batch: " + what);
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

// A parsed layout-1 or -2 batch.
struct SharedBatch {
  std::vector<CodeStream> heads;     // params only
  std::vector<FramedParams> params;  // per head: its parameter block's bytes
  std::vector<uint8_t> is_delta;
  std::vector<ChannelTable> channel_tables;
  ChannelModel model;  // the channel being read
  DecodeTables tables;
  size_t heads_per_slice = 0;
  struct Slice {
    int n_lanes = 0;
    uint64_t length = 0;
    std::span<const uint8_t> payload;
    size_t offset = 0;
  };
  std::vector<Slice> slices;
  size_t param_bytes = 0, model_bytes = 0, payload_bytes = 0;  // for size reports
};

// An error of head h's parameter block, naming the head.
Error head_error(size_t h, const Error& e) {
  return Error(e.code(), "codec batch, head " + std::to_string(h) + ": " + e.message());
}

size_t bounded_mul(size_t a, size_t b, size_t limit, const char* what) {
  size_t r;
  if (__builtin_mul_overflow(a, b, &r) || r > limit) {
    fail(ErrorCode::invalid_argument,
         std::string("codec batch: ") + what + " (" + std::to_string(a) + " * " +
             std::to_string(b) +
             ") exceeds DecodeOptions::max_elements = " + std::to_string(limit));
  }
  return r;
}

// A head's parameter block in a parsed batch.
struct HeadParams {
  SharedBatch* batch;
  size_t head;
};
std::vector<HeadParams>& thread_head_params() {
  thread_local std::vector<HeadParams> kept;
  return kept;
}

// The parameters of the framed blocks `jobs` (in order): compact blocks of one shape up to
// kMaxLaneReaders at a time where the AVX-512 lanes reader runs (at least kMinLanes of them; a
// block's codes are a chain of ~10 cycles each, which the lanes reader runs 8, 16 or 24 side by
// side), the rest two at a time (a compact pair's codes read side by side and their group-0
// chains too), in parallel where there are enough (compact bits were most of decoding a batch
// of short heads, and fixed-width ones a serial part that held 2-thread decodes to ~1.6x). The
// first error in order is the one reported, naming the head: a unit reports its first failing
// head (a lanes unit that fails is read again in pairs, in order), and the first failing unit's
// error is thrown.
void decode_head_params(std::span<const HeadParams> jobs) {
  // Fewer blocks than this side by side run slower than in pairs (the lanes' chain is a gather
  // and four prefix counts: ~50 cycles for four codes of each).
  constexpr size_t kMinLanes = 6;
  // The most residual bytes (8 a code, two codes a parameter) a lanes unit reads before it
  // reconstructs its blocks' parameters: 16 heads of 128 x 128 parameters (4 MiB) ran past this
  // machine's 2 MiB L2, and the unit was slower than pairs.
  constexpr size_t kLaneBytes = size_t{1} << 20;
  const auto params = [&](size_t k) -> const FramedParams& {
    return jobs[k].batch->params[jobs[k].head];
  };
  const auto head = [&](size_t k) -> CodeStream& { return jobs[k].batch->heads[jobs[k].head]; };
  const auto in_pairs = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; i += 2) {
      size_t at = i;  // the job whose error this is
      try {
        if (i + 1 < end && params(i).precision == ParamPrecision::compact &&
            params(i + 1).precision == ParamPrecision::compact) {
          int failing = 0;
          try {
            decode_compact_params_pair(params(i), head(i), params(i + 1), head(i + 1), failing);
          } catch (const Error&) {
            at = i + static_cast<size_t>(failing);
            throw;
          }
          continue;
        }
        for (at = i; at < i + 2 && at < end; ++at) decode_framed_params(params(at), head(at));
      } catch (const Error& e) {
        throw head_error(jobs[at].head, e);
      }
    }
  };
  size_t n_params = 0;
  for (const HeadParams& j : jobs) {
    const CodeStream& s = j.batch->heads[j.head];
    n_params += s.n_groups() * s.dim;
  }
  const double job_ns =
      jobs.empty() ? 0.0
                   : kParamNs * static_cast<double>(n_params) / static_cast<double>(jobs.size());
  const size_t threads = threads_for_work(jobs.size(), job_ns);
  // Units [begin, end): runs of compact blocks of one shape cut into lanes units (as many as
  // the threads where that leaves kMinLanes each), the rest in pairs.
  struct Unit {
    size_t begin, end;
    bool lanes;
  };
  thread_local std::vector<Unit> kept_units;
  std::vector<Unit>& units = kept_units;
  units.clear();
  const bool lanes = BitReader::lanes_available();
  for (size_t i = 0; i < jobs.size();) {
    const auto same_shape = [&](size_t k) {
      return params(k).precision == ParamPrecision::compact &&
             head(k).n_groups() == head(i).n_groups() && head(k).dim == head(i).dim;
    };
    const size_t most = std::min(
        kMaxLaneReaders, kLaneBytes / std::max<size_t>(1, 16 * head(i).n_groups() * head(i).dim));
    size_t run = i;
    while (lanes && most >= kMinLanes && run < jobs.size() && same_shape(run)) ++run;
    const size_t length = run - i;
    if (length < kMinLanes) {
      const size_t end = std::min(jobs.size(), i + 2);
      units.push_back(Unit{i, end, false});
      i = end;
      continue;
    }
    // As few units as hold the run (three groups of 8 lanes only where they hold all of it:
    // tinystories-hd64's 24 heads 0.98 of the time as one unit, not two of 12; stories260K's 40
    // 1.01 as two of 20, not three), or a multiple of the threads where that leaves each enough.
    const size_t two_groups = std::min<size_t>(16, most);
    size_t parts = length <= most ? 1 : (length + two_groups - 1) / two_groups;
    const size_t even = (parts + threads - 1) / threads * threads;
    if (length / even >= kMinLanes) parts = even;
    for (size_t p = 0; p < parts; ++p)
      units.push_back(Unit{i + length * p / parts, i + length * (p + 1) / parts, true});
    i = run;
  }
  const auto decode_unit = [&](const Unit& u) {
    if (u.lanes) {
      const FramedParams* framed[kMaxLaneReaders];
      CodeStream* streams[kMaxLaneReaders];
      const size_t m = u.end - u.begin;
      for (size_t k = 0; k < m; ++k) {
        framed[k] = &params(u.begin + k);
        streams[k] = &head(u.begin + k);
      }
      try {
        if (decode_compact_params_lanes(std::span(framed, m), std::span(streams, m))) return;
      } catch (const Error&) {
        // read again in pairs below: their first error in order
      }
    }
    in_pairs(u.begin, u.end);
  };
  if (units.size() >= 2 && threads > 1) {
    std::vector<std::exception_ptr> errors(units.size());
    const double unit_ns =
        job_ns * static_cast<double>(jobs.size()) / static_cast<double>(units.size());
    parallel_for_work(units.size(), unit_ns, [&](size_t u) {
      try {
        decode_unit(units[u]);
      } catch (const Error&) {
        errors[u] = std::current_exception();
      }
    });
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  } else {
    for (const Unit& u : units) decode_unit(u);
  }
}

// Parses a layout-1 or -2 batch body into `b`, reusing its storage: decoders of many small
// tensors (a .cgkv file's chunks) keep one batch per thread instead of allocating per head and
// per channel. params_now: its parameters decoded before its models are read, so that errors
// come in the order of the bytes; else left to the caller (decode_head_params), whose errors
// may then come after later sections' (decode_batches_to_rows decodes batch by batch again
// after any failure).
void parse_shared(std::span<const uint8_t> body, size_t body_offset, uint8_t layout, size_t n_heads,
                  const DecodeOptions& options, SharedBatch& b, bool params_now = true) {
  wire::Reader r(body, "codec batch", body_offset);
  b.param_bytes = b.model_bytes = b.payload_bytes = 0;
  const uint64_t n_rows = r.varint("n_rows");
  const uint64_t dim = r.varint("dim");
  const uint64_t group_size = r.varint("group_size");
  const uint8_t bits = r.u8("bits");
  if (group_size == 0) corrupt("group_size is 0");
  if (bits < 1 || bits > 8) corrupt("bits " + std::to_string(bits) + " outside 1..8");
  if (n_heads == 0) corrupt("a shared batch needs at least one head");
  const size_t limit = options.max_elements;
  const size_t n = bounded_mul(n_rows, dim, limit, "n_rows * dim");
  if (n == 0) corrupt("a shared batch needs at least one element per head");
  const size_t n_groups = (n_rows + group_size - 1) / group_size;
  bounded_mul(bounded_mul(n_groups, group_size, limit, "padded rows"), dim, limit,
              "padded rows * dim");
  size_t total_elements;
  if (__builtin_mul_overflow(n_heads, n, &total_elements))
    corrupt("n_heads * n_rows * dim overflows");
  const size_t total_rows = n_heads * n_rows;
  const size_t params_begin = r.offset();
  b.heads.resize(n_heads);
  b.params.resize(n_heads);
  // The blocks framed in order, decoded after (decode_head_params). Errors are reported as a
  // sequential parse would: the first failing head's, a framing error after the parameters of
  // the heads before it.
  std::exception_ptr framing_error;
  size_t framed = 0;
  for (; framed < n_heads; ++framed) {
    CodeStream& s = b.heads[framed];
    s.n_rows = n_rows;
    s.dim = dim;
    s.group_size = group_size;
    s.bits = bits;
    try {
      frame_param_block(r, s, b.params[framed]);
    } catch (const Error& e) {
      framing_error = std::make_exception_ptr(head_error(framed, e));
      break;
    }
  }
  if (params_now) {
    std::vector<HeadParams>& jobs = thread_head_params();
    jobs.clear();
    for (size_t h = 0; h < framed; ++h) jobs.push_back(HeadParams{&b, h});
    decode_head_params(jobs);
  }
  if (framing_error) std::rethrow_exception(framing_error);
  b.param_bytes = r.offset() - params_begin;
  const int coder_precision = r.u8("coder_precision");
  if (coder_precision < 1 || coder_precision > kMaxPrecision)
    corrupt("coder_precision " + std::to_string(coder_precision) + " outside 1..12");
  const size_t models_begin = r.offset();
  const uint64_t side_bytes = r.varint("model_bytes");
  if (side_bytes > r.remaining()) r.need(r.remaining() + 1, "channel models");
  const bool one_model = layout == kBatchOneModel;
  if (!one_model && dim > side_bytes * 4)
    corrupt("dim " + std::to_string(dim) + " exceeds the model section");
  const size_t side_offset = r.offset();
  BitReader bits_in(r.take(side_bytes, "channel models"), side_offset);
  b.is_delta.resize(dim);
  if (one_model) {
    // One model codes every channel's G * n_rows symbols (total_elements in all; its table
    // precision is bounded by that count).
    read_channel_model(bits_in, bits, total_elements, b.model);
    if (b.model.table.t > coder_precision)
      corrupt("the model's table precision above coder_precision");
    std::fill(b.is_delta.begin(), b.is_delta.end(), b.model.kind == ChannelKind::delta_table);
  } else {
    b.channel_tables.resize(dim);
    for (size_t c = 0; c < dim; ++c) {
      read_channel_model(bits_in, bits, total_rows, b.model);
      if (b.model.table.t > coder_precision)
        corrupt("channel " + std::to_string(c) + " table precision above coder_precision");
      b.is_delta[c] = b.model.kind == ChannelKind::delta_table;
      b.channel_tables[c] = b.model.table;  // copy-assignment keeps the storage
    }
  }
  bits_in.finish("channel models");
  b.model_bytes = r.offset() - models_begin;
  b.heads_per_slice = r.varint("heads_per_slice");
  if (b.heads_per_slice < 1 || b.heads_per_slice > n_heads)
    corrupt("heads_per_slice " + std::to_string(b.heads_per_slice) + " outside 1.." +
            std::to_string(n_heads));
  const size_t n_slices = (n_heads + b.heads_per_slice - 1) / b.heads_per_slice;
  if (n_slices > r.remaining()) r.need(r.remaining() + 1, "slice table");
  b.slices.resize(n_slices);
  for (size_t i = 0; i < n_slices; ++i) {
    b.slices[i].n_lanes = r.u8("slice n_lanes");
    if (b.slices[i].n_lanes < 1 || b.slices[i].n_lanes > kMaxLanes)
      corrupt("slice " + std::to_string(i) + " n_lanes " + std::to_string(b.slices[i].n_lanes) +
              " outside 1..32");
    b.slices[i].length = r.varint("slice payload length");
  }
  for (auto& slice : b.slices) {
    if (slice.length > r.remaining()) r.need(r.remaining() + 1, "slice payload");
    slice.offset = r.offset();
    slice.payload = r.take(slice.length, "slice payload");
    b.payload_bytes += slice.length;
  }
  if (r.remaining() != 0)
    corrupt(std::to_string(r.remaining()) + " trailing bytes at offset " +
            std::to_string(r.offset()));
  if (one_model) {
    build_shared_decode_tables(b.model.table, dim, coder_precision, b.tables);
  } else {
    build_decode_tables(b.channel_tables, coder_precision, b.tables);
  }
}

// The batches of this thread's last parse (see parse_shared): thread_batches(n)[i] for
// i < n. References stay valid until the thread's next call; nothing a batch decode calls
// parses another batch on the same thread.
std::vector<SharedBatch>& thread_batches(size_t n) {
  thread_local std::vector<SharedBatch> batches;
  if (batches.size() < n) batches.resize(n);
  return batches;
}
SharedBatch& thread_batch() {
  return thread_batches(1)[0];
}

// Decodes every slice of `batches` and hands each of its heads' codes (real rows) to
// fn(batch, head, codes). The slices of all batches form one list; each thread takes a
// contiguous run of it and decodes it up to ten slices at a time (rans_decode_group:
// independent payloads overlap in the core, also those of batches with their own tables, such
// as layers' K and V, whose short tensors are one slice each). The bytes do not depend on the
// grouping.
template <typename Fn>
void decode_slices(std::span<const SharedBatch* const> batches, Fn&& fn) {
  struct Item {
    const SharedBatch* batch;
    size_t index, slice;
  };
  thread_local std::vector<Item> kept_items;
  std::vector<Item>& items = kept_items;
  items.clear();
  size_t total = 0, slice_elements = 0;
  for (size_t k = 0; k < batches.size(); ++k) {
    const SharedBatch& b = *batches[k];
    const size_t n = b.heads[0].n_rows * b.heads[0].dim;
    total += b.heads.size() * n;
    slice_elements = std::max(slice_elements, b.heads_per_slice * n);
    for (size_t i = 0; i < b.slices.size(); ++i) items.push_back(Item{&b, k, i});
  }
  const size_t n_items = items.size();
  if (n_items == 0) return;
  // A thread per run only where runs are long enough to pay for their start, and one run inside
  // an outer parallel loop (a file's chunks), which keeps this one on its thread: longer runs
  // group more payloads in lockstep.
  const size_t threads = threads_for_work(
      n_items, kDecodeNsPerCode * static_cast<double>(total) / static_cast<double>(n_items));
  // On several threads, runs of four items (a lockstep quad) that the threads take in turn, where
  // they come out even; otherwise one run per thread, of equal length, each in quads and then a
  // pair or a single item: twelve slices on two threads were runs of 4 + 4 | 4 (one thread
  // decoded twice the other's), now 6 | 6 (tinystories-hd64's heads as 12 slices: 2-thread
  // decode 303 -> 258-263 us, AMD Zen 4 VM).
  const size_t per_run = threads == 1 || n_items % (4 * threads) != 0
                             ? std::max<size_t>((n_items + threads - 1) / threads, 1)
                             : 4;
  const size_t runs = (n_items + per_run - 1) / per_run;
  auto slice_payload = [&](const Item& it, uint8_t* symbols) {
    const SharedBatch& b = *it.batch;
    const size_t n = b.heads[0].n_rows * b.heads[0].dim;
    const size_t h0 = it.slice * b.heads_per_slice;
    const size_t h1 = std::min(b.heads.size(), h0 + b.heads_per_slice);
    const SharedBatch::Slice& s = b.slices[it.slice];
    return RansPayload{s.payload, s.offset, s.n_lanes, std::span<uint8_t>(symbols, (h1 - h0) * n)};
  };
  auto emit = [&](const Item& it, uint8_t* symbols) {
    const SharedBatch& b = *it.batch;
    const size_t n = b.heads[0].n_rows * b.heads[0].dim;
    const size_t h0 = it.slice * b.heads_per_slice;
    const size_t h1 = std::min(b.heads.size(), h0 + b.heads_per_slice);
    // The slice's heads together: their token-delta chains overlap.
    symbols_to_codes_in_place(symbols, n, std::span<const CodeStream>(b.heads).subspan(h0, h1 - h0),
                              b.is_delta.data());
    for (size_t h = h0; h < h1; ++h) fn(it.index, h, symbols + (h - h0) * n);
  };
  // Errors as a sequential decode reports them: each run stops at its first failing slice, and
  // the first failing run's error is thrown (parallel_for would rethrow whichever came first: a
  // damaged shared model fails every run).
  std::vector<std::exception_ptr> errors(runs);
  const auto run = [&](size_t r) {
    const size_t s0 = r * per_run, s1 = std::min(n_items, s0 + per_run);
    uint8_t* first = scratch_bytes(std::min(s1 - s0, kMaxDecodeGroup) * slice_elements);
    for (size_t i = s0; i < s1;) {
      // Up to kMaxDecodeGroup items of one dim at a time: short 8-lane payloads (a chunk's
      // layers' K and V) run in lockstep. Ten only where ten are left (a group of five layers),
      // else up to eight: twelve 32-lane payloads as 8 + 4 are three quads, as 10 + 2 two quads
      // and two pairs.
      const size_t dim = items[i].batch->heads[0].dim;
      size_t n = 1;
      while (n < kMaxDecodeGroup && i + n < s1 && items[i + n].batch->heads[0].dim == dim) ++n;
      if (n == kMaxDecodeGroup && i + n < s1) n = 8;
      RansPayload p[kMaxDecodeGroup];
      const DecodeTables* t[kMaxDecodeGroup];
      for (size_t k = 0; k < n; ++k) {
        p[k] = slice_payload(items[i + k], first + k * slice_elements);
        t[k] = &items[i + k].batch->tables;
      }
      rans_decode_group(std::span(p, n), std::span(t, n), dim);
      for (size_t k = 0; k < n; ++k) emit(items[i + k], p[k].symbols.data());
      i += n;
    }
  };
  parallel_for(runs, [&](size_t r) {
    try {
      run(r);
    } catch (...) {
      errors[r] = std::current_exception();
    }
  });
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

template <typename Fn>
void decode_slices(const SharedBatch& b, Fn&& fn) {
  const SharedBatch* one[1] = {&b};
  decode_slices(std::span<const SharedBatch* const>(one),
                [&](size_t, size_t h, const uint8_t* codes) { fn(h, codes); });
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
  std::vector<uint64_t> head_cost_, head_fp_, channel_bound_, pooled_bound_;
  std::vector<ChannelModel> models_;
  ChannelModel one_;  // the pooled model (layout 2)
  bool one_model_ = false;
  std::vector<ChannelTable> tables_;
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
  // Independent records, estimated: models, lane states, ~8 header/framing bytes per head.
  auto record_bytes = [&](uint64_t model_fp) {
    return fp_bytes(model_fp) + 4 * static_cast<uint64_t>(choose_lanes(n, wide_from_)) + 8;
  };
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
  // Shared.
  std::vector<uint32_t> raw(dim * n_syms, 0), del(allow_delta ? dim * n_syms : 0, 0);
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
    std::vector<uint32_t> raw_all(n_syms, 0), del_all(allow_delta ? n_syms : 0, 0);
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
  // most of the encoder's model search); the search runs only when they do not.
  // Otherwise the bounds become exact estimates channel by channel (cost only: no tables
  // built), in one parallel loop, until their sum reaches the shared size (shared wins; the
  // channels left are skipped) or every channel is exact (the estimate decides). Exact
  // estimates only raise the sum, so the outcome does not depend on which channels were
  // evaluated; 2-head batches of short chunks (a .cgkv file's) often settle after a few. The
  // channels go in ascending order of their bounds: the lowest lie furthest below the uniform
  // cost (the same for every channel), which most exact estimates reach, so they raise the sum
  // most (tinystories-hd64's level-high file: 1,779 instead of 2,437 of its 3,072 estimates;
  // in the order of the exact rises themselves, 1,763).
  if (shared > independent) {
    std::vector<uint32_t> order(G * dim);
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return channel_bound[a] < channel_bound[b]; });
    std::vector<std::atomic<uint64_t>> fp(G);
    for (size_t h = 0; h < G; ++h) fp[h].store(head_fp[h], std::memory_order_relaxed);
    std::atomic<uint64_t> bound{independent};
    parallel_for_work(order.size(), 4.0 * static_cast<double>(n_syms), [&](size_t i) {
      if (bound.load(std::memory_order_relaxed) >= shared) return;
      const size_t h = order[i] / dim, c = order[i] % dim;
      const uint64_t rise =
          channel_model_cost(
              std::span<const uint32_t>(raw_counts[h].data() + c * n_syms, n_syms),
              allow_delta ? std::span<const uint32_t>(delta_counts[h].data() + c * n_syms, n_syms)
                          : std::span<const uint32_t>(),
              first.n_rows, first.bits) -
          channel_bound[order[i]];
      // The head's record estimate from its sum before and after this rise (any order of the
      // rises gives the same final sums).
      const uint64_t before = fp[h].fetch_add(rise, std::memory_order_relaxed);
      bound.fetch_add(record_bytes(before + rise) - record_bytes(before),
                      std::memory_order_relaxed);
    });
    if (shared > bound.load()) return false;
  }
  if (one_smaller) {
    take_one_model();
  } else {
    take_models();
  }
  return true;
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
                 0};
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
  parallel_for_work(e.n_slices(), e.slice_ns(), [&](size_t i) {
    const RansJob job = e.slice(i, Scratch::symbols);
    rans_encode(job.symbols, job.dim, job.channels, job.precision, job.n_lanes, *job.out, job.at);
  });
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

std::vector<CodeStream> decode_batch_shared(std::span<const uint8_t> body, size_t body_offset,
                                            uint8_t layout, size_t n_heads,
                                            const DecodeOptions& options) {
  SharedBatch b;  // its heads are returned
  parse_shared(body, body_offset, layout, n_heads, options, b);
  decode_slices(b,
                [&](size_t h, const uint8_t* codes) { set_codes_with_padding(b.heads[h], codes); });
  return std::move(b.heads);
}

void decode_batch_shared_to_half(std::span<const uint8_t> body, size_t body_offset, uint8_t layout,
                                 size_t n_heads, const DecodeOptions& options,
                                 const std::function<Half*(size_t)>& dest) {
  SharedBatch& b = thread_batch();
  parse_shared(body, body_offset, layout, n_heads, options, b);
  const size_t n = b.heads[0].n_rows * b.heads[0].dim;
  Half* out = dest(n_heads * n);
  decode_slices(b, [&](size_t h, const uint8_t* codes) {
    dequant_real_rows(b.heads[h], codes, out + h * n);
  });
}

void decode_batch_shared_to_rows(std::span<const uint8_t> body, size_t body_offset, uint8_t layout,
                                 const BatchShape& shape, std::span<Half> out,
                                 const DecodeOptions& options) {
  SharedBatch& b = thread_batch();
  parse_shared(body, body_offset, layout, shape.n_heads, options, b);
  check_head_shape(b.heads[0], 0, shape);  // the heads of a shared batch share one shape
  const size_t row_stride = shape.n_heads * shape.dim;
  decode_slices(b, [&](size_t h, const uint8_t* codes) {
    dequant_real_rows_strided(b.heads[h], codes, out.data() + h * shape.dim, row_stride);
  });
}

void decode_batches_shared_to_rows(std::span<const SharedBatchRows> batches,
                                   const DecodeOptions& options) {
  std::vector<SharedBatch>& parsed = thread_batches(batches.size());
  thread_local std::vector<const SharedBatch*> kept_list;
  std::vector<const SharedBatch*>& list = kept_list;
  list.clear();
  // Every batch's parameters after all are parsed, two heads at a time across batches (a file's
  // one-head tensors: a layer's K with its V).
  std::vector<HeadParams>& jobs = thread_head_params();
  jobs.clear();
  for (size_t k = 0; k < batches.size(); ++k) {
    const SharedBatchRows& j = batches[k];
    parse_shared(j.body, j.body_offset, j.layout, j.shape.n_heads, options, parsed[k], false);
    check_head_shape(parsed[k].heads[0], 0, j.shape);
    list.push_back(&parsed[k]);
    for (size_t h = 0; h < parsed[k].heads.size(); ++h) jobs.push_back(HeadParams{&parsed[k], h});
  }
  decode_head_params(jobs);
  decode_slices(
      std::span<const SharedBatch* const>(list), [&](size_t k, size_t h, const uint8_t* codes) {
        const BatchShape& shape = batches[k].shape;
        dequant_real_rows_strided(parsed[k].heads[h], codes, batches[k].out.data() + h * shape.dim,
                                  shape.n_heads * shape.dim);
      });
}

SharedBatchSizes shared_batch_sizes(std::span<const uint8_t> body, size_t body_offset,
                                    uint8_t layout, size_t n_heads) {
  SharedBatch& b = thread_batch();
  parse_shared(body, body_offset, layout, n_heads, DecodeOptions{}, b);
  return SharedBatchSizes{b.param_bytes, b.model_bytes, b.payload_bytes};
}

}  // namespace cachegen::detail
