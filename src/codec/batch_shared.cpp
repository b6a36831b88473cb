// The shared-model batch (layout 1): G heads of one shape share one model per channel and are
// coded as slices of consecutive heads, each slice one interleaved rANS payload. Sharing
// removes the per-head table tax of short heads, and slices of >= kSliceElements elements
// give SIMD decoders 32 lanes however short a head is, while keeping slices independent so
// that threads decode them in parallel. This file parses and decodes such batches; the
// encoder is in batch_shared_encode.cpp.
#include <algorithm>
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

// The decoders' work estimates (parallel_for_work), this machine's (Zen 4, 2.6 GHz): a slice's
// codes ~0.35 ns each, decoded and dequantized; compact parameters (scale, zero pairs) ~12 ns
// each (~30 cycles, a serial chain per channel).
constexpr double kDecodeNsPerCode = 0.35;
constexpr double kParamNs = 12;

[[noreturn]] void corrupt(const std::string& what) {
  fail(ErrorCode::corrupt_input, "codec batch: " + what);
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

}  // namespace

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
