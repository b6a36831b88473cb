// LayerKVCache: append, quantize completed groups, seal blocks, fetch, statistics.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>

#include "cache/layer_kv_cache_internal.h"
#include "cachegen/error.h"
#include "cachegen/kv_cache.h"
#include "cachegen/runtime.h"
#include "codec/params_codec.h"
#include "codec/stream_format.h"
#include "core/checks.h"
#include "core/parallel.h"
#include "quant/kernels.h"
#include "transform/rope_kept.h"

namespace cachegen {

using detail::invalid;

namespace detail {

// Throws "<name><problem> at element <i>" unless x[0, n) holds finite fp16 values only (NaN,
// Inf: beyond the fp16 range), i the first bad one's place in x.
void check_finite_half(const Half* x, size_t n, const char* name, const char* problem) {
  // One branch-free pass (the largest magnitude, quant_kernels' max_f16_magnitude); the
  // element is looked for only when one is bad.
  if (quant_kernels().max_f16_magnitude(reinterpret_cast<const uint16_t*>(x), n) >= 0x7c00) {
    size_t i = 0;
    while ((x[i].bits & 0x7c00u) != 0x7c00u) ++i;
    invalid(std::string(name) + problem + " at element " + std::to_string(i));
  }
}

namespace {

constexpr const char* kNotFinite = " holds a NaN, Inf or a value beyond the fp16 range";

// The report of check_finite_half for an fp16 view (none for other types): the first
// non-finite value's place in the view.
void check_finite_view(const KVBlockView& x, const char* name) {
  if (x.dtype == KVDType::f16 && x.data != nullptr) {
    check_finite_half(static_cast<const Half*>(x.data), x.n_kv_heads * x.n_tokens * x.head_dim,
                      name, kNotFinite);
  }
}

template <size_t D>
void copy_rows_of(const Half* from, size_t from_stride, Half* to, size_t to_stride, size_t rows) {
  for (size_t j = 0; j < rows; ++j)
    std::memcpy(to + j * to_stride, from + j * from_stride, D * sizeof(Half));
}
}  // namespace

void copy_rows(const Half* from, size_t from_stride, Half* to, size_t to_stride, size_t rows,
               size_t dim) {
  // A head's row is short (16..256 bytes): the usual widths as fixed-size copies (a memcpy
  // call per row was 5% of a file encode, a loop of the runtime width 6% of stories260K's).
  using Fixed = void (*)(const Half*, size_t, Half*, size_t, size_t);
  static constexpr std::pair<size_t, Fixed> kFixed[] = {{8, copy_rows_of<8>},
                                                        {16, copy_rows_of<16>},
                                                        {32, copy_rows_of<32>},
                                                        {64, copy_rows_of<64>},
                                                        {128, copy_rows_of<128>}};
  for (const auto& [width, fixed] : kFixed) {
    if (width == dim) return fixed(from, from_stride, to, to_stride, rows);
  }
  for (size_t j = 0; j < rows; ++j) {
    const uint16_t* __restrict a = reinterpret_cast<const uint16_t*>(from + j * from_stride);
    uint16_t* __restrict b = reinterpret_cast<uint16_t*>(to + j * to_stride);
    for (size_t d = 0; d < dim; ++d) b[d] = a[d];
  }
}

HalfRows half_rows(const KVBlockView& x, const char* name, bool copy, std::vector<Half>& storage,
                   bool check_in_place) {
  const size_t H = x.n_kv_heads, T = x.n_tokens, D = x.head_dim, n = H * T * D;
  if (n == 0) return {nullptr, T * D, D};
  if (x.data == nullptr) invalid(std::string(name) + ".data is null");
  if (x.dtype != KVDType::f16 && x.dtype != KVDType::bf16 && x.dtype != KVDType::f32)
    invalid(std::string(name) + ".dtype is not f32, f16 or bf16");
  // fp16 is checked (unless check_in_place is false) and read where it is (unless a copy is
  // asked for); other types are converted into storage in the view's order and checked there.
  const bool token_major = x.token_major && H > 1;
  const Half* const f16 = x.dtype == KVDType::f16 ? static_cast<const Half*>(x.data) : nullptr;
  if (f16) {
    if (copy || check_in_place) check_finite_half(f16, n, name, kNotFinite);
    if (!copy) return token_major ? HalfRows{f16, D, H * D} : HalfRows{f16, T * D, D};
  } else {
    storage.resize(n);
    if (x.dtype == KVDType::bf16) {
      const auto* in = static_cast<const BFloat16*>(x.data);
      for (size_t i = 0; i < n; ++i) storage[i] = float_to_half(bf16_to_float(in[i]));
    } else {
      const auto* in = static_cast<const float*>(x.data);
      for (size_t i = 0; i < n; ++i) storage[i] = float_to_half(in[i]);
    }
    check_finite_half(storage.data(), n, name, kNotFinite);
  }
  if (!token_major) {
    if (f16) storage.assign(f16, f16 + n);
    return {storage.data(), T * D, D};
  }
  // To [heads, tokens, dim], into a buffer made as a copy (every element is overwritten:
  // std::vector<Half>(n) zero-fills one element at a time, through a reference the compiler
  // cannot prove outside the storage).
  const Half* const source = f16 ? f16 : storage.data();
  std::vector<Half> t(source, source + n);
  for (size_t h = 0; h < H; ++h) copy_rows(source + h * D, H * D, t.data() + h * T * D, D, T, D);
  storage.swap(t);
  return {storage.data(), T * D, D};
}

// Rows [row0, row0 + rows) of a stream as a new stream (row0 and rows multiples of group_size,
// or rows reaching the end).
CodeStream slice_groups(const CodeStream& s, size_t row0, size_t rows) {
  const size_t gs = s.group_size, g0 = row0 / gs;
  CodeStream out;
  out.dim = s.dim;
  out.bits = s.bits;
  out.group_size = gs;
  out.n_rows = rows;
  const size_t ng = out.n_groups();
  out.codes.assign(s.codes.begin() + static_cast<ptrdiff_t>(g0 * gs * s.dim),
                   s.codes.begin() + static_cast<ptrdiff_t>((g0 + ng) * gs * s.dim));
  out.scale.assign(s.scale.begin() + static_cast<ptrdiff_t>(g0 * s.dim),
                   s.scale.begin() + static_cast<ptrdiff_t>((g0 + ng) * s.dim));
  out.zero.assign(s.zero.begin() + static_cast<ptrdiff_t>(g0 * s.dim),
                  s.zero.begin() + static_cast<ptrdiff_t>((g0 + ng) * s.dim));
  return out;
}

// Appends b's rows to a (a.n_rows a multiple of group_size).
void append_stream(CodeStream& a, const CodeStream& b) {
  if (a.n_rows == 0) {
    a = b;
    return;
  }
  a.codes.insert(a.codes.end(), b.codes.begin(), b.codes.end());
  a.scale.insert(a.scale.end(), b.scale.begin(), b.scale.end());
  a.zero.insert(a.zero.end(), b.zero.begin(), b.zero.end());
  a.n_rows += b.n_rows;
}

}  // namespace detail

LayerKVCache::LayerKVCache(size_t n_kv_heads, size_t head_dim, int key_bits, int value_bits,
                           const KVCacheConfig& config)
    : heads_(0), dim_(0), bits_{key_bits, value_bits}, config_(config) {
  config_.validate();
  if (key_bits != 0 || value_bits != 0) {  // 0 and 0: recomputed, not stored
    detail::check_bits(key_bits, "key_bits");
    detail::check_bits(value_bits, "value_bits");
  }
  if (n_kv_heads != 0 || head_dim != 0) set_shape(n_kv_heads, head_dim);
}

void LayerKVCache::set_shape(size_t n_kv_heads, size_t head_dim) {
  if (n_kv_heads < 1 || n_kv_heads > 65536)
    invalid("n_kv_heads must be in 1..65536, got " + std::to_string(n_kv_heads));
  if (head_dim < 1 || head_dim > 65536)
    invalid("head_dim must be in 1..65536, got " + std::to_string(head_dim));
  detail::checked_mul(detail::checked_mul(n_kv_heads, config_.block_tokens, "cache block"),
                      head_dim, "cache block");
  if (config_.key_pre_rope) config_.rope.validate(head_dim);
  heads_ = n_kv_heads;
  dim_ = head_dim;
  if (recomputed()) return;  // holds nothing
  for (PlaneState& p : plane_) {
    p.pending.resize(heads_);
    p.residual.clear();  // sized where first used (residual_buffer)
  }
}

Half* LayerKVCache::residual_buffer(int kind) {
  // Appends of whole groups never use it: a zero-filled buffer per layer and kind, made with
  // every cache, was 1-2% of a file encode.
  std::vector<Half>& r = plane_[kind].residual;
  if (r.empty()) r.resize(heads_ * config_.group_size * dim_);
  return r.data();
}

void LayerKVCache::append(const KVBlockView& k, const KVBlockView& v) {
  if (heads_ == 0) {  // shape taken from the first append (KVCacheFactory::create(config))
    if (k.n_kv_heads != v.n_kv_heads || k.head_dim != v.head_dim) {
      invalid("k is " + std::to_string(k.n_kv_heads) + " heads x " + std::to_string(k.head_dim) +
              " dims but v is " + std::to_string(v.n_kv_heads) + " x " +
              std::to_string(v.head_dim));
    }
    set_shape(k.n_kv_heads, k.head_dim);
  }
  for (const KVBlockView* x : {&k, &v}) {
    const char* name = x == &k ? "k" : "v";
    if (x->n_kv_heads != heads_ || x->head_dim != dim_) {
      invalid(std::string(name) + " has " + std::to_string(x->n_kv_heads) + " heads x " +
              std::to_string(x->head_dim) + " dims, the cache " + std::to_string(heads_) + " x " +
              std::to_string(dim_));
    }
  }
  if (k.n_tokens != v.n_tokens) {
    invalid("k has " + std::to_string(k.n_tokens) + " tokens but v has " +
            std::to_string(v.n_tokens));
  }
  detail::checked_mul(detail::checked_mul(heads_, k.n_tokens, "k"), dim_, "k");
  if (config_.key_pre_rope &&
      int64_t{config_.rope_position_offset} + static_cast<int64_t>(n_tokens_ + k.n_tokens) >
          int64_t{INT32_MAX}) {
    invalid("positions of the appended keys exceed 2^31 - 1 (rope_position_offset " +
            std::to_string(config_.rope_position_offset) + ")");
  }
  if (recomputed()) {  // nothing stored: only the token count moves
    n_tokens_ += k.n_tokens;
    return;
  }
  const size_t T = k.n_tokens, gs = config_.group_size, B = config_.block_tokens;
  const bool on_pool = thread_count() > 1 && !detail::inside_parallel_for();
  // Convert and check everything before changing any state. fp16 rows are copied into the
  // groups straight from the caller's array (once, transposed on the way); other types, and
  // keys to un-rotate, go through a converted [heads, tokens, dim] copy first.
  // Where the rows are taken by one step that commits nothing before it completes (whole
  // blocks on the pool's threads, or whole groups inside the open block: a file encode's
  // appends), the compact quantizer's min/max pass, which reads every value anyway, is the
  // fp16 rows' finiteness check (a pass of its own was ~2% of a file encode): on its error the
  // pending streams go back to their rows and the first non-finite value is reported as before.
  const bool whole_blocks =
      residual_rows_ == 0 && pending_rows_ == 0 && T >= 2 * B && T % B == 0 && on_pool;
  const bool one_step = residual_rows_ == 0 && T % gs == 0 && T <= B - pending_rows_;
  const bool quantizer_checks =
      config_.params == ParamMode::compact && T > 0 && (whole_blocks || one_step);
  std::vector<Half> k_storage, v_storage;
  const detail::HalfRows kh =
      detail::half_rows(k, "k", config_.key_pre_rope, k_storage, !quantizer_checks);
  const detail::HalfRows vh = detail::half_rows(v, "v", false, v_storage, !quantizer_checks);
  if (config_.key_pre_rope) {
    rotate_keys(k_storage, T, n_tokens_, true);
    detail::check_finite_half(k_storage.data(), k_storage.size(), "k",
                              ": a key with RoPE undone exceeds the fp16 range");
  }
  const auto checked = [&](const auto& quantize) {
    if (!quantizer_checks) return quantize();
    try {
      quantize();
    } catch (...) {
      for (PlaneState& p : plane_) {
        for (CodeStream& s : p.pending) {
          s.n_rows = pending_rows_;  // 0: empty (its vectors kept)
          if (pending_rows_ == 0) continue;
          s.codes.resize(pending_rows_ * dim_);
          s.scale.resize(pending_rows_ / gs * dim_);
          s.zero.resize(pending_rows_ / gs * dim_);
        }
      }
      detail::check_finite_view(k, "k");
      detail::check_finite_view(v, "v");
      throw;  // not a non-finite value
    }
  };
  size_t t = 0;
  while (t < T) {
    if (residual_rows_ == 0 && pending_rows_ == 0 && T - t >= 2 * B && on_pool) {
      // Whole blocks, each quantized and coded on one of the pool's threads (the same bytes): a
      // file encode's layers that do not split evenly over the threads come here one at a time.
      const size_t n_blocks = (T - t) / B;
      std::vector<std::array<CompressedBlock, 2>> coded(n_blocks);
      checked([&] {
        detail::parallel_for(n_blocks, [&](size_t b) {
          std::array<std::vector<CodeStream>, 2> pending{std::vector<CodeStream>(heads_),
                                                         std::vector<CodeStream>(heads_)};
          const size_t r = t + b * B;
          quantize_groups(0, pending[0], kh.base + r * kh.row_stride, kh.head_stride, kh.row_stride,
                          B);
          quantize_groups(1, pending[1], vh.base + r * vh.row_stride, vh.head_stride, vh.row_stride,
                          B);
          coded[b] = code_blocks(pending[0], pending[1], n_tokens_ + b * B);
        });
      });
      for (std::array<CompressedBlock, 2>& c : coded) {
        for (int kind = 0; kind < 2; ++kind) plane_[kind].blocks.push_back(std::move(c[kind]));
      }
      n_tokens_ += n_blocks * B;
      t += n_blocks * B;
      continue;
    }
    if (residual_rows_ == 0 && T - t >= gs) {
      // Whole groups with none waiting: straight from the caller's rows, up to the block's end
      // (a quantizer call per head and block, not per group: the fixed costs of stories260K's
      // 256-value groups were ~8% of its 3-bit file encode).
      const size_t rows = std::min(B - pending_rows_, (T - t) / gs * gs);
      checked([&] {
        quantize_groups(0, plane_[0].pending, kh.base + t * kh.row_stride, kh.head_stride,
                        kh.row_stride, rows);
        quantize_groups(1, plane_[1].pending, vh.base + t * vh.row_stride, vh.head_stride,
                        vh.row_stride, rows);
      });
      n_tokens_ += rows;
      pending_rows_ += rows;
      t += rows;
    } else {
      const size_t take = std::min(gs - residual_rows_, T - t);
      for (int kind = 0; kind < 2; ++kind) {
        const detail::HalfRows& src = kind == 0 ? kh : vh;
        for (size_t h = 0; h < heads_; ++h) {
          Half* const dst = residual_buffer(kind) + (h * gs + residual_rows_) * dim_;
          const Half* const from = src.base + h * src.head_stride + t * src.row_stride;
          if (src.row_stride == dim_) {
            std::memcpy(dst, from, take * dim_ * sizeof(Half));
            continue;
          }
          detail::copy_rows(from, src.row_stride, dst, dim_, take, dim_);  // token-major rows
        }
      }
      residual_rows_ += take;
      n_tokens_ += take;
      t += take;
      if (residual_rows_ < gs) continue;
      for (int kind = 0; kind < 2; ++kind)
        quantize_groups(kind, plane_[kind].pending, plane_[kind].residual.data(), gs * dim_, dim_,
                        gs);
      residual_rows_ = 0;
      pending_rows_ += gs;
    }
    if (pending_rows_ == config_.block_tokens) {
      seal_blocks();
      pending_rows_ = 0;
    }
  }
}

bool detail::quantize_rows_half(const Half* x, size_t stride, size_t rows, size_t dim, int bits,
                                const KVCacheConfig& config, CodeStream& out) {
  if (rows <= 1) stride = dim;
  if (config.params == ParamMode::reference) {
    if (stride != dim) invalid("the reference quantizer takes rows side by side");
    quantize_to_codes_into(std::span<const Half>(x, rows * dim), rows, dim, bits, config.group_size,
                           out);
    return true;
  }
  EncodeOptions opt;
  opt.allow_delta = config.use_delta;
  const size_t span = rows == 0 ? 0 : (rows - 1) * stride + dim;
  return quantize_values_reporting(std::span<const Half>(x, span), stride, rows, dim, bits,
                                   config.group_size, opt, out) == ParamPrecision::compact ||
         rows <= config.group_size;
}

void LayerKVCache::quantize_groups(int kind, std::vector<CodeStream>& pending, const Half* base,
                                   size_t head_stride, size_t row_stride, size_t rows) const {
  const size_t gs = config_.group_size;
  thread_local CodeStream g;            // the groups of one head, its buffers kept between calls
  thread_local std::vector<Half> side;  // a head's rows side by side, where the caller's are not
  // Rows apart (a head's inside token-major rows of every head) are read where they lie by the
  // compact quantizer where its vector loops take such rows (head_dim 8, or a multiple of 16):
  // the copy side by side was 5% of a file encode of 8 heads of 128 (Intel Emerald Rapids).
  const bool in_place =
      row_stride == dim_ || (config_.params == ParamMode::compact && (dim_ == 8 || dim_ % 16 == 0));
  const size_t stride = in_place ? row_stride : dim_;
  for (size_t h = 0; h < heads_; ++h) {
    const Half* x = base + h * head_stride;
    if (!in_place) {
      side.resize(rows * dim_);
      detail::copy_rows(x, row_stride, side.data(), dim_, rows, dim_);
      x = side.data();
    }
    CodeStream& dst = pending[h];
    const bool first = dst.n_rows == 0;
    if (first) {  // room for a block (up to 4,096 rows), kept by seal_blocks
      const size_t block = std::min<size_t>(config_.block_tokens, 4096);
      dst.codes.reserve(block * dim_);
      dst.scale.reserve(block / gs * dim_);
      dst.zero.reserve(block / gs * dim_);
    }
    // Into the block's stream itself where it is empty (no copy).
    CodeStream& q = first ? dst : g;
    if (detail::quantize_rows_half(x, stride, rows, dim_, bits_[kind], config_, q)) {
      if (!first) detail::append_stream(dst, g);
      continue;
    }
    // Off the compact grid together: group by group, as rows arriving a group at a time are.
    dst.n_rows = 0;
    for (size_t r = 0; r < rows; r += gs) {
      detail::quantize_rows_half(x + r * stride, stride, gs, dim_, bits_[kind], config_, g);
      detail::append_stream(dst, g);
    }
  }
}

namespace {

// A block of `streams` at token_begin whose bytes are coded.
CompressedBlock block_of(const std::vector<CodeStream>& streams, size_t token_begin,
                         const KVCacheConfig& config, std::vector<uint8_t> bytes) {
  CompressedBlock b;
  b.token_begin = token_begin;
  b.n_tokens = streams.empty() ? 0 : streams[0].n_rows;
  b.bytes = std::move(bytes);
  if (config.size_estimate)
    b.estimated_bytes = entropy_coded_bytes_batch(streams, config.use_delta, config.per_channel);
  // The cache's own streams (quantized here, checked by the encoder): sizes from their shapes.
  for (const CodeStream& s : streams) b.fixed_bytes += detail::fixed_width_bytes_of(s);
  return b;
}

EncodeOptions block_options(const KVCacheConfig& config) {
  EncodeOptions opt;
  opt.allow_delta = config.use_delta;
  opt.allow_one_model = config.one_model;
  return opt;
}

}  // namespace

CompressedBlock detail::code_block(const std::vector<CodeStream>& streams, size_t token_begin,
                                   const KVCacheConfig& config) {
  return block_of(streams, token_begin, config, encode_batch(streams, block_options(config)));
}

std::array<CompressedBlock, 2> LayerKVCache::code_blocks(const std::vector<CodeStream>& k,
                                                         const std::vector<CodeStream>& v,
                                                         size_t token_begin) const {
  // K's and V's blocks coded together: their short payloads in lockstep (encode_batch_pair).
  std::array<std::vector<uint8_t>, 2> bytes =
      detail::encode_batch_pair(k, v, block_options(config_));
  return {block_of(k, token_begin, config_, std::move(bytes[0])),
          block_of(v, token_begin, config_, std::move(bytes[1]))};
}

void LayerKVCache::seal_blocks() {
  const size_t begin = n_tokens_ - residual_rows_ - pending_rows_;
  std::array<CompressedBlock, 2> blocks = code_blocks(plane_[0].pending, plane_[1].pending, begin);
  for (int kind = 0; kind < 2; ++kind) {
    PlaneState& p = plane_[kind];
    p.blocks.push_back(std::move(blocks[kind]));
    // Emptied: n_rows 0 (append_stream and quantize_groups take such a stream as empty), its
    // vectors kept at their sizes, so that the next block's quantizer, which writes every code
    // and parameter, finds them sized and does not zero-fill them first.
    for (CodeStream& s : p.pending) s.n_rows = 0;
  }
}

void LayerKVCache::rotate_keys(std::vector<Half>& x, size_t n_tokens, size_t first,
                               bool inverse) const {
  if (n_tokens == 0) return;
  // The angles once for every head (kept between calls: every layer rotates at the same
  // positions); the conversions through the SIMD kernels (the same values as half_to_float /
  // float_to_half).
  size_t first_row = 0;
  const RopeAngles& angles =
      detail::kept_rope_angles(int64_t{config_.rope_position_offset} + static_cast<int64_t>(first),
                               n_tokens, dim_, config_.rope, inverse, first_row);
  const detail::QuantKernels& k = detail::quant_kernels();
  std::vector<float> f(n_tokens * dim_);
  for (size_t h = 0; h < heads_; ++h) {  // [heads, T, dim]: one head's rows at a time
    uint16_t* head = reinterpret_cast<uint16_t*>(x.data() + h * n_tokens * dim_);
    k.f16_to_f32(head, f.data(), f.size());
    rope_rows(f, n_tokens, 1, dim_, angles, first_row, config_.rope.neox);
    k.f32_to_f16(f.data(), head, f.size());
  }
}

std::vector<CodeStream> LayerKVCache::quantize_residual(int kind) const {
  std::vector<CodeStream> out(heads_);
  if (residual_rows_ == 0) return out;
  const size_t gs = config_.group_size;
  for (size_t h = 0; h < heads_; ++h) {
    detail::quantize_rows_half(plane_[kind].residual.data() + h * gs * dim_, dim_, residual_rows_,
                               dim_, bits_[kind], config_, out[h]);
  }
  return out;
}

const std::vector<CompressedBlock>& LayerKVCache::sealed_blocks(int kind) const {
  if (kind != 0 && kind != 1) invalid("kind must be 0 (K) or 1 (V)");
  return plane_[kind].blocks;  // none when recomputed
}

CompressedBlock LayerKVCache::tail_block(int kind) const {
  if (kind != 0 && kind != 1) invalid("kind must be 0 (K) or 1 (V)");
  if (recomputed() || pending_rows_ + residual_rows_ == 0) {
    CompressedBlock none;
    none.token_begin = n_tokens_;
    return none;
  }
  std::vector<CodeStream> tail(heads_);
  const std::vector<CodeStream> res = quantize_residual(kind);
  for (size_t h = 0; h < heads_; ++h) {
    tail[h] = plane_[kind].pending[h];
    if (tail[h].n_rows == 0) {
      tail[h] = res[h];
    } else if (residual_rows_ > 0) {
      detail::append_stream(tail[h], res[h]);
    }
  }
  return detail::code_block(tail, n_tokens_ - pending_rows_ - residual_rows_, config_);
}

std::vector<CompressedBlock> LayerKVCache::snapshot_blocks(int kind) const {
  std::vector<CompressedBlock> out = sealed_blocks(kind);
  CompressedBlock tail = tail_block(kind);
  if (tail.n_tokens > 0) out.push_back(std::move(tail));
  return out;
}

std::vector<Half> LayerKVCache::fetch(int kind, size_t begin, size_t end) const {
  end = std::min(end, n_tokens_);
  if (begin > end)
    invalid("fetch range begins at " + std::to_string(begin) + " after its end " +
            std::to_string(end));
  const size_t T = end - begin;
  std::vector<Half> out(heads_ * T * dim_);
  // Copies rows [lo, hi) of a [heads, rows_total, dim] source whose first row is token `first`.
  auto copy_rows = [&](const Half* src, size_t first, size_t rows_total, size_t head_stride) {
    const size_t lo = std::max(begin, first), hi = std::min(end, first + rows_total);
    if (lo >= hi) return;
    for (size_t h = 0; h < heads_; ++h) {
      std::memcpy(out.data() + (h * T + (lo - begin)) * dim_,
                  src + h * head_stride + (lo - first) * dim_, (hi - lo) * dim_ * sizeof(Half));
    }
  };
  const PlaneState& p = plane_[kind];
  std::vector<Half> block;  // one block's [heads, n_tokens, dim], reused across blocks
  for (const CompressedBlock& b : p.blocks) {
    if (b.token_begin >= end || b.token_begin + b.n_tokens <= begin) continue;
    block.resize(heads_ * b.n_tokens * dim_);
    decode_batch_to_half(b.bytes, block);
    copy_rows(block.data(), b.token_begin, b.n_tokens, b.n_tokens * dim_);
  }
  const size_t pending_begin = n_tokens_ - residual_rows_ - pending_rows_;
  if (pending_rows_ > 0 && pending_begin < end && pending_begin + pending_rows_ > begin) {
    std::vector<Half> y(heads_ * pending_rows_ * dim_);
    for (size_t h = 0; h < heads_; ++h) {
      dequant_codes_into(
          p.pending[h], std::span<Half>(y).subspan(h * pending_rows_ * dim_, pending_rows_ * dim_));
    }
    copy_rows(y.data(), pending_begin, pending_rows_, pending_rows_ * dim_);
  }
  if (residual_rows_ > 0) {
    copy_rows(p.residual.data(), n_tokens_ - residual_rows_, residual_rows_,
              config_.group_size * dim_);
  }
  return out;
}

std::vector<Half> LayerKVCache::fetch_keys(size_t begin, size_t end) const {
  if (recomputed()) invalid("fetch_keys: the layer is recomputed, not stored (bits 0)");
  std::vector<Half> out = fetch(0, begin, end);
  if (config_.key_pre_rope) rotate_keys(out, out.size() / (heads_ * dim_), begin, false);
  return out;
}
std::vector<Half> LayerKVCache::fetch_values(size_t begin, size_t end) const {
  if (recomputed()) invalid("fetch_values: the layer is recomputed, not stored (bits 0)");
  return fetch(1, begin, end);
}

KVSizeStats LayerKVCache::plane_stats(int kind) const {
  const PlaneState& p = plane_[kind];
  KVSizeStats s;
  const size_t per_token = heads_ * dim_;
  s.n_tokens = n_tokens_;
  s.n_elements = n_tokens_ * per_token;
  s.quantized_elements = (n_tokens_ - residual_rows_) * per_token;
  s.fp16_bytes = s.n_elements * 2;
  s.residual_tokens = residual_rows_;
  s.assigned_avg_bits = bits_[kind];
  if (recomputed()) {  // every token "stored" at 0 bits
    s.quantized_elements = s.n_elements;
    s.residual_tokens = 0;
    return s;
  }
  for (const CompressedBlock& b : p.blocks) {
    s.compressed_bytes += b.bytes.size();
    s.estimated_bytes += b.estimated_bytes;
    s.fixed_bytes += b.fixed_bytes;
    s.memory_bytes += b.bytes.capacity() + sizeof(CompressedBlock);
  }
  if (pending_rows_ > 0) {
    const CompressedBlock tail = detail::code_block(p.pending, 0, config_);
    s.compressed_bytes += tail.bytes.size();
    s.estimated_bytes += tail.estimated_bytes;
    s.fixed_bytes += tail.fixed_bytes;
    for (const CodeStream& c : p.pending) {
      s.memory_bytes += c.codes.capacity() + 4 * (c.scale.capacity() + c.zero.capacity());
    }
  }
  s.memory_bytes += p.residual.capacity() * sizeof(Half);
  return s;
}

LayerStats LayerKVCache::stats() const {
  LayerStats s{plane_stats(0), plane_stats(1), {}};
  s.both = s.k;
  s.both += s.v;
  return s;
}

}  // namespace cachegen
