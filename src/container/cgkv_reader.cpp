// Reading .cgkv files: header on open, chunks on demand, each verified before it is decoded.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "cachegen/profile.h"
#include "cachegen/runtime.h"
#include "codec/stream_format.h"
#include "container/cgkv_internal.h"
#include "core/checks.h"
#include "core/huge_pages.h"
#include "core/parallel.h"
#include "core/wire.h"
#include "profile/transform_codec.h"
#include "quant/kernels.h"
#include "transform/rope_kept.h"

namespace cachegen {

CgkvReader::CgkvReader(std::shared_ptr<const Source> src) : src_(std::move(src)) {
  info_ = detail::parse_header(*src_);
}

CgkvReader CgkvReader::from_bytes(std::vector<uint8_t> bytes) {
  return CgkvReader(detail::memory_source(std::move(bytes)));
}

namespace {

// A reader of the file at `path` (its source made by make), errors naming the path.
template <typename MakeSource>
CgkvReader reader_of_file(const std::string& path, MakeSource&& make) {
  try {
    return make(path);
  } catch (const Error& e) {
    if (std::string(e.what()).find(path) != std::string::npos) throw;
    throw Error(e.code(), e.message() + " (in '" + path + "')");
  }
}

}  // namespace

CgkvReader CgkvReader::open_file(const std::string& path) {
  return reader_of_file(path,
                        [](const std::string& p) { return CgkvReader(detail::file_source(p)); });
}

CgkvReader CgkvReader::map_file(const std::string& path) {
  return reader_of_file(path,
                        [](const std::string& p) { return CgkvReader(detail::mapped_source(p)); });
}

void CgkvReader::set_profile(std::shared_ptr<const KvProfile> profile) {
  if (profile && info_.codec == ContainerCodec::transform) {
    if (profile->id() != info_.profile_id) {
      char want[17], got[17];
      std::snprintf(want, sizeof want, "%016llx",
                    static_cast<unsigned long long>(info_.profile_id));
      std::snprintf(got, sizeof got, "%016llx", static_cast<unsigned long long>(profile->id()));
      detail::invalid(std::string("cgkv: this file was written with profile ") + want +
                      ", not with the profile given (" + got + ")");
    }
    if (profile->n_layers != info_.n_layers || profile->n_kv_heads != info_.n_kv_heads ||
        profile->head_dim != info_.head_dim) {
      detail::invalid("cgkv: the profile's shape is not the file's");
    }
  }
  profile_ = std::move(profile);
}

void CgkvReader::need_profile() const {
  if (info_.codec != ContainerCodec::transform || profile_) return;
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(info_.profile_id));
  detail::invalid(std::string("cgkv: this file is transform-coded: decoding it needs its "
                              "calibration profile ") +
                  id + " (set_profile; --profile on the command line)");
}

std::span<const uint8_t> CgkvReader::chunk_bytes(size_t index,
                                                 std::unique_ptr<uint8_t[]>& hold) const {
  if (index >= info_.chunks.size()) {
    detail::invalid("chunk " + std::to_string(index) + " does not exist (" +
                    std::to_string(info_.chunks.size()) + " chunks)");
  }
  const CgkvRange& r = info_.chunks[index].range;
  std::span<const uint8_t> b = src_->view(r.offset, static_cast<size_t>(r.bytes));
  if (b.size() != r.bytes) {
    const auto n = static_cast<size_t>(r.bytes);
    hold = detail::make_huge_for_overwrite<uint8_t>(n);
    src_->read_into(r.offset, {hold.get(), n});
    b = {hold.get(), n};
  }
  if (detail::chunk_checksum(info_.version, index, info_.chunks[index], b) != r.xxh64) {
    throw Error(ErrorCode::corrupt_input,
                "cgkv: chunk " + std::to_string(index) + " (tokens " +
                    std::to_string(info_.chunks[index].token_begin) + ".." +
                    std::to_string(info_.chunks[index].token_begin + info_.chunks[index].n_tokens) +
                    ") checksum mismatch");
  }
  return b;
}

std::vector<uint8_t> CgkvReader::read_chunk(size_t index) const {
  std::unique_ptr<uint8_t[]> hold;
  const std::span<const uint8_t> b = chunk_bytes(index, hold);
  return {b.begin(), b.end()};
}

std::vector<uint8_t> CgkvReader::read_blob_at(size_t index) const {
  if (index >= info_.blobs.size()) {
    detail::invalid("blob " + std::to_string(index) + " does not exist (" +
                    std::to_string(info_.blobs.size()) + " blobs)");
  }
  const CgkvBlobInfo& b = info_.blobs[index];
  std::vector<uint8_t> bytes = src_->read(b.range.offset, static_cast<size_t>(b.range.bytes));
  if (detail::xxh64(bytes) != b.range.xxh64) {
    throw Error(ErrorCode::corrupt_input, "cgkv: blob " + std::to_string(index) + " (kind " +
                                              std::to_string(b.kind) + ") checksum mismatch");
  }
  return bytes;
}

std::optional<std::vector<uint8_t>> CgkvReader::read_blob(uint32_t kind) const {
  for (size_t i = 0; i < info_.blobs.size(); ++i) {
    if (info_.blobs[i].kind == kind) return read_blob_at(i);
  }
  return std::nullopt;
}

namespace {

// One stored tensor of a chunk, as walk_chunk finds it.
struct TensorRef {
  size_t t = 0;      // index among all attention layers' K and V
  size_t layer = 0;  // model layer
  int kind = 0;      // 0 = K, 1 = V
  int bits = 0;      // quantized files
  float step = 0;    // transform files
};

// Decodes one tensor of chunk c into out (token-major [rows, heads, dim] rows of the requested
// window [lo, hi) relative to the chunk).
void decode_tensor(const CgkvInfo& info, const KvProfile* profile, size_t c, const TensorRef& ref,
                   std::span<const uint8_t> data, size_t lo, size_t hi, Half* out,
                   const std::string& ctx) {
  const size_t rows = info.chunks[c].n_tokens;
  const int bits = ref.bits;
  const size_t H = static_cast<size_t>(info.n_kv_heads), D = static_cast<size_t>(info.head_dim);
  if (info.codec == ContainerCodec::transform) {
    const size_t begin = info.chunks[c].token_begin;
    detail::TransformSteps steps;
    steps.step = ref.step;
    steps.sink_rows =
        info.sink_tokens > begin ? std::min<size_t>(info.sink_tokens - begin, rows) : 0;
    steps.sink_scale = info.sink_scale;
    const ProfileTensor& pt = profile->tensor(static_cast<int>(ref.layer), ref.kind);
    // Keys coded pre-RoPE are rotated in fp32 before their one rounding to fp16.
    detail::TransformRope rope{
        info.rope, int64_t{info.rope_position_offset} + static_cast<int64_t>(begin), H, D};
    const detail::TransformRope* r =
        ref.kind == 0 && info.layers[ref.layer].key_transform == KeyTransform::pre_rope ? &rope
                                                                                        : nullptr;
    try {
      if (lo == 0 && hi == rows) {
        detail::unpack_transform(data, pt, H * D, profile->block, steps,
                                 std::span<Half>(out, rows * H * D), ctx, r);
        return;
      }
      std::vector<Half> all(rows * H * D);
      detail::unpack_transform(data, pt, H * D, profile->block, steps, all, ctx, r);
      std::memcpy(out, all.data() + lo * H * D, (hi - lo) * H * D * sizeof(Half));
    } catch (const Error& e) {
      if (e.message().rfind(ctx, 0) == 0) throw;
      throw Error(e.code(), ctx + ": " + e.message());
    }
    return;
  }
  if (info.codec == ContainerCodec::lossless_fp16) {
    if (lo == 0 && hi == rows) {  // stored token-major already
      detail::unpack_fp16_lossless(data, std::span<Half>(out, rows * H * D), H * D, ctx,
                                   info.version);
      return;
    }
    std::vector<Half> all(H * rows * D);
    detail::unpack_fp16_lossless(data, all, H * D, ctx, info.version);
    std::memcpy(out, all.data() + lo * H * D, (hi - lo) * H * D * 2);
    return;
  }
  DecodeOptions opt;
  opt.max_elements = (rows + info.group_size) * D;
  const BatchShape shape{H, rows, D, bits, info.group_size};
  try {
    if (lo == 0 && hi == rows) {  // the fused decoder writes the caller's rows directly
      decode_batch_to_rows(data, shape, std::span<Half>(out, rows * H * D), opt);
      return;
    }
    std::vector<Half> all(rows * H * D);  // rows <= chunk_tokens: bounded by the reader's limit
    decode_batch_to_rows(data, shape, all, opt);
    std::memcpy(out, all.data() + lo * H * D, (hi - lo) * H * D * sizeof(Half));
  } catch (const Error& e) {
    throw Error(e.code(), ctx + ": " + e.message());
  }
}

// Re-applies RoPE to the keys of pre-RoPE layers in out (a read of tokens [begin, begin + T)),
// rows [r0, r0 + rows) of each. (Transform files rotate their keys as they decode them:
// decode_tensor.)
void rotate_pre_rope_keys(const CgkvInfo& info, size_t begin, size_t T, size_t r0, size_t rows,
                          std::span<Half> out) {
  if (!info.has_rope || rows == 0 || info.codec == ContainerCodec::transform) return;
  const size_t H = static_cast<size_t>(info.n_kv_heads), D = static_cast<size_t>(info.head_dim);
  // The angles once for every layer (kept between reads: chunks of files that start a context
  // at the same position rotate at the same positions); blocks of rows rotated in place by
  // rope_f16, which rounds back saturating, as dequantization does (keys that were finite fp16
  // stay finite).
  size_t first_row = 0;
  const RopeAngles& angles = detail::kept_rope_angles(
      int64_t{info.rope_position_offset} + static_cast<int64_t>(begin + r0), rows, D, info.rope,
      false, first_row);
  std::vector<Half*> keys;
  size_t t = 0;
  for (const CgkvLayerInfo& li : info.layers) {
    if (!li.attention) continue;
    if (li.key_transform == KeyTransform::pre_rope)
      keys.push_back(out.data() + (t * T + r0) * H * D);
    t += 2;
  }
  const size_t block = std::max<size_t>(1, 16384 / (H * D));
  const size_t blocks = (rows + block - 1) / block;
  const detail::QuantKernels& kernels = detail::quant_kernels();
  const size_t n_pairs = angles.n_pairs;
  if (2 * n_pairs > D || (first_row + rows) * n_pairs > angles.cos.size())
    detail::invalid("rotate_pre_rope_keys: angles do not cover these rows");
  detail::parallel_for(keys.size() * blocks, [&](size_t task) {
    const size_t b0 = (task % blocks) * block, n = std::min(block, rows - b0);
    const size_t at = (first_row + b0) * n_pairs;
    kernels.rope_f16(reinterpret_cast<uint16_t*>(keys[task / blocks] + b0 * H * D), n, H, D,
                     angles.cos.data() + at, angles.sin.data() + at, n_pairs, info.rope.neox);
  });
}

}  // namespace

namespace {

// The one walk over a chunk's payload (FORMAT.md, "Chunk payload"), shared by read_tokens,
// verify and chunk_tensor_bytes: calls fn(TensorRef, data, context) for every stored tensor in
// order (recomputed layers store nothing and are skipped). The lengths must add up to exactly
// the chunk's bytes.
template <typename Fn>
void walk_chunk(const CgkvInfo& info, size_t c, std::span<const uint8_t> bytes, Fn&& fn) {
  wire::Reader r(bytes, "cgkv chunk " + std::to_string(c),
                 static_cast<size_t>(info.chunks[c].range.offset));
  size_t t = 0;
  for (size_t l = 0; l < info.layers.size(); ++l) {
    if (!info.layers[l].attention) continue;
    if (info.layers[l].recomputed) {
      t += 2;
      continue;
    }
    for (int kind = 0; kind < 2; ++kind, ++t) {
      const std::string ctx =
          "cgkv chunk " + std::to_string(c) + ", layer " + std::to_string(l) + (kind ? " V" : " K");
      const uint64_t len = r.varint("tensor length");
      if (len > r.remaining()) {
        throw Error(ErrorCode::corrupt_input, ctx + ": length " + std::to_string(len) +
                                                  " at offset " + std::to_string(r.offset()) +
                                                  " runs past the chunk");
      }
      const auto data = r.take(len, "tensor data");
      if (info.codec == ContainerCodec::quantized && info.version < detail::kCgkvOneModelVersion &&
          detail::batch_layout(data) == detail::kBatchOneModel) {
        throw Error(ErrorCode::corrupt_input,
                    ctx + ": codec batch layout 2 in a file of version " +
                        std::to_string(info.version) + " (it needs version " +
                        std::to_string(detail::kCgkvOneModelVersion) + ")");
      }
      const CgkvLayerInfo& li = info.layers[l];
      fn(TensorRef{t, l, kind, kind ? li.value_bits : li.key_bits,
                   kind ? li.value_step : li.key_step},
         data, ctx);
    }
  }
  r.expect_end("its tensors");
}

// Decodes rows [lo, hi) (relative to the chunk) of every stored tensor of chunk c (bytes
// already verified) into dst(t). Layers' K and V, read whole, are decoded together: four layers
// at a time from a quantized file (decode_batches_to_rows; two where that leaves the pool's
// threads too few groups), one from a lossless one
// (unpack_fp16_lossless_pair), so that their rANS payloads overlap in the core; after a failure
// they are decoded one at a time, so that errors name the tensor as a sequential read would.
// dst_per_tensor: dst(t) is tensor t's own place, and dst may be called from the pool's threads
// (false: one scratch buffer for every tensor, as verify's).
template <typename Dst>
void decode_chunk(const CgkvInfo& info, const KvProfile* profile, size_t c,
                  std::span<const uint8_t> bytes, size_t lo, size_t hi, bool dst_per_tensor,
                  Dst&& dst) {
  const size_t rows = info.chunks[c].n_tokens;
  const bool whole = info.codec != ContainerCodec::transform && lo == 0 && hi == rows;
  if (!whole) {
    walk_chunk(info, c, bytes,
               [&](const TensorRef& ref, std::span<const uint8_t> data, const std::string& ctx) {
                 decode_tensor(info, profile, c, ref, data, lo, hi, dst(ref.t), ctx);
               });
    return;
  }
  const size_t H = static_cast<size_t>(info.n_kv_heads), D = static_cast<size_t>(info.head_dim);
  struct Held {
    TensorRef ref;
    std::span<const uint8_t> data;
    std::string ctx;
  };
  auto decode_one = [&](const Held& t) {
    decode_tensor(info, profile, c, t.ref, t.data, lo, hi, dst(t.ref.t), t.ctx);
  };
  // Complete K/V pairs waiting to be decoded, in groups decoded together: four layers' of a
  // quantized file, the last group taking what is left (their short payloads run in lockstep,
  // rans_decode_group: stories260K's five layers' 8-lane chunk tensors decode in 0.86 of the
  // time of groups of two layers, whose two chains left the core waiting on their latency; in
  // 64-token chunks, 4-lane payloads, 0.75, and tinystories-hd64's 0.93; AMD Zen 4 VM), one
  // layer's of a lossless one. With dst_per_tensor every pair is held until the walk ends and
  // the groups run on the pool's threads: a chunk read alone (a short context's file, a context
  // store's chunk) would otherwise decode on one thread. There, where groups of four layers
  // would give each thread fewer than two, they are of two (stories260K's five layers as 4 + 1
  // on two threads: 1.35x the time of 2 + 2 + 1).
  const bool lossless = info.codec == ContainerCodec::lossless_fp16;
  const size_t most = lossless ? 1 : 4;
  const size_t pairs_per_call = dst_per_tensor ? SIZE_MAX : most;
  std::vector<std::pair<Held, Held>> pairs;
  // One group; after a failure its tensors one at a time, so that the error names the first
  // failing tensor (the lossless pair decoder orders its errors itself).
  auto decode_group = [&](std::span<const std::pair<Held, Held>> g) {
    if (lossless) {
      for (const auto& [k, v] : g) {
        detail::unpack_fp16_lossless_pair({k.data, {dst(k.ref.t), rows * H * D}, &k.ctx},
                                          {v.data, {dst(v.ref.t), rows * H * D}, &v.ctx}, H * D,
                                          info.version);
      }
      return;
    }
    std::vector<BatchRows> batches;
    for (const auto& [k, v] : g) {
      for (const Held* t : {&k, &v}) {
        batches.push_back({t->data, BatchShape{H, rows, D, t->ref.bits, info.group_size},
                           std::span<Half>(dst(t->ref.t), rows * H * D)});
      }
    }
    DecodeOptions opt;
    opt.max_elements = (rows + info.group_size) * D;
    try {
      decode_batches_to_rows(batches, opt);
    } catch (const Error&) {
      for (const auto& [k, v] : g) {
        decode_one(k);
        decode_one(v);
      }
      throw;
    }
  };
  auto decode_pairs = [&] {
    if (pairs.empty()) return;
    const std::vector<std::pair<Held, Held>> held = std::move(pairs);
    pairs.clear();
    // One group at a time where dst is one scratch buffer for every tensor (verify's, resized
    // by dst): groups on two threads wrote it, and resized it, at once.
    const size_t threads = !dst_per_tensor || detail::inside_parallel_for() ? 1 : thread_count();
    const size_t group = most == 1 || threads == 1 || held.size() >= 2 * most * threads ? most : 2;
    // The last group takes what is left (stories260K's five layers as one group of ten payloads
    // in lockstep, not 4 + 1).
    const size_t n_groups = std::max<size_t>(held.size() / group, 1);
    std::vector<std::exception_ptr> errors(n_groups);  // thrown in file order
    detail::parallel_for(n_groups, [&](size_t g) {
      try {
        const size_t end = g + 1 == n_groups ? held.size() : (g + 1) * group;
        decode_group(std::span(held).subspan(g * group, end - g * group));
      } catch (...) {
        errors[g] = std::current_exception();
      }
    });
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  };
  std::optional<Held> key;  // a layer's K, waiting for its V
  // Every tensor still held, one at a time, in order: after an error, so that the first
  // failing tensor's own error is the one thrown.
  auto decode_held_one_by_one = [&] {
    for (const auto& [k, v] : pairs) {
      decode_one(k);
      decode_one(v);
    }
    pairs.clear();
    if (key) decode_one(*key);
    key.reset();
  };
  try {
    walk_chunk(info, c, bytes,
               [&](const TensorRef& ref, std::span<const uint8_t> data, const std::string& ctx) {
                 Held t{ref, data, ctx};
                 if (ref.kind == 0) {
                   if (key) {  // a K without its V: it and what came before first
                     decode_pairs();
                     decode_one(*key);
                   }
                   key = std::move(t);
                 } else if (!key || key->ref.layer != ref.layer) {  // walk_chunk yields K first
                   decode_pairs();
                   if (key) decode_one(*key);
                   key.reset();
                   decode_one(t);
                 } else {
                   pairs.emplace_back(std::move(*key), std::move(t));
                   key.reset();
                   if (pairs.size() == pairs_per_call) decode_pairs();
                 }
               });
  } catch (const Error&) {
    // A tensor whose framing failed: those before it report their own errors first.
    decode_held_one_by_one();
    throw;
  }
  decode_pairs();
  if (key) decode_one(*key);
}

}  // namespace

size_t CgkvReader::read_elements(size_t begin, size_t end) const {
  if (begin > end || end > info_.n_tokens) {
    detail::invalid("token range " + std::to_string(begin) + ":" + std::to_string(end) +
                    " is outside 0:" + std::to_string(info_.n_tokens));
  }
  const size_t row = static_cast<size_t>(info_.n_kv_heads) * static_cast<size_t>(info_.head_dim);
  const size_t n_attn = static_cast<size_t>(info_.n_attention_layers());
  return detail::checked_mul(n_attn * 2 * (end - begin), row, "read_tokens output");
}

std::vector<Half> CgkvReader::read_tokens(size_t begin, size_t end) const {
  const size_t n_out = read_elements(begin, end);
  if (n_out > max_elements_) read_tokens_into(begin, end, {});  // throws, naming the limit
  std::vector<Half> out = detail::zeroed_halves(n_out);
  read_tokens_into(begin, end, out);
  return out;
}

void CgkvReader::read_tokens_into(size_t begin, size_t end, std::span<Half> out) const {
  const size_t n_out = read_elements(begin, end);
  const size_t T = end - begin,
               row = static_cast<size_t>(info_.n_kv_heads) * static_cast<size_t>(info_.head_dim);
  // Chunk buffers hold a whole chunk of one tensor: bound them too.
  const size_t chunk_values =
      detail::checked_mul(std::min(info_.chunk_tokens, info_.n_tokens), row, "cgkv chunk");
  if (n_out > max_elements_ || (T != 0 && chunk_values > max_elements_)) {
    detail::invalid("cgkv: reading tokens " + std::to_string(begin) + ":" + std::to_string(end) +
                    " needs " + std::to_string(std::max(n_out, chunk_values)) +
                    " values, over this reader's limit of " + std::to_string(max_elements_) +
                    " (set_max_elements)");
  }
  if (out.size() != n_out) {
    detail::invalid("read_tokens_into: out holds " + std::to_string(out.size()) +
                    " values; tokens " + std::to_string(begin) + ":" + std::to_string(end) +
                    " are " + std::to_string(n_out));
  }
  if (T == 0) return;  // an empty range reads no chunk
  need_profile();
  // Recomputed layers store nothing and come back as zeros.
  if (!info_.recomputed_layers().empty()) std::fill(out.begin(), out.end(), Half{});
  // Chunks decode in parallel (each writes its own rows of out; a chunk's own tensors then
  // run on one thread). Errors are reported as a sequential read would: the first chunk's.
  std::vector<size_t> chunks;
  for (size_t c = 0; c < info_.chunks.size(); ++c) {
    const CgkvChunkInfo& ci = info_.chunks[c];
    if (ci.token_begin < end && ci.token_begin + ci.n_tokens > begin) chunks.push_back(c);
  }
  std::vector<std::exception_ptr> errors(chunks.size());
  detail::parallel_for(chunks.size(), [&](size_t k) {
    try {
      const size_t c = chunks[k];
      const CgkvChunkInfo& ci = info_.chunks[c];
      const size_t lo = std::max(begin, ci.token_begin) - ci.token_begin;
      const size_t hi = std::min(end, ci.token_begin + ci.n_tokens) - ci.token_begin;
      std::unique_ptr<uint8_t[]> hold;
      const size_t r0 = ci.token_begin + lo - begin;
      decode_chunk(info_, profile_.get(), c, chunk_bytes(c, hold), lo, hi, true,
                   [&](size_t t) { return out.data() + (t * T + r0) * row; });
      // The chunk's keys while they are in cache (after the whole read, a long context's were
      // read back from memory).
      rotate_pre_rope_keys(info_, begin, T, r0, hi - lo, out);
    } catch (...) {
      errors[k] = std::current_exception();
    }
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void CgkvReader::verify() const {
  // One chunk's tensor at a time, into one buffer of a chunk's rows: memory follows a chunk,
  // not the file, and recomputed layers cost nothing (a file of empty chunks verifies in
  // O(chunks)).
  const size_t row = static_cast<size_t>(info_.n_kv_heads) * static_cast<size_t>(info_.head_dim);
  std::vector<Half> scratch;
  std::unique_ptr<uint8_t[]> hold;
  need_profile();
  for (size_t c = 0; c < info_.chunks.size(); ++c) {
    const CgkvChunkInfo& ci = info_.chunks[c];
    decode_chunk(
        info_, profile_.get(), c, chunk_bytes(c, hold), 0, ci.n_tokens, false, [&](size_t) {
          const size_t n = detail::checked_mul(ci.n_tokens, row, "cgkv chunk");
          if (n > max_elements_) {
            detail::invalid("cgkv: chunk " + std::to_string(c) + " holds " + std::to_string(n) +
                            " values per tensor, over this reader's limit of " +
                            std::to_string(max_elements_) + " (set_max_elements)");
          }
          if (scratch.size() < n) scratch.resize(n);
          return scratch.data();
        });
  }
  for (size_t b = 0; b < info_.blobs.size(); ++b) read_blob_at(b);
}

std::vector<uint64_t> CgkvReader::chunk_tensor_bytes(size_t index) const {
  std::vector<uint64_t> sizes(static_cast<size_t>(info_.n_attention_layers()) * 2, 0);
  std::unique_ptr<uint8_t[]> hold;
  walk_chunk(info_, index, chunk_bytes(index, hold),
             [&](const TensorRef& ref, std::span<const uint8_t> data, const std::string&) {
               sizes[ref.t] = data.size();
             });
  return sizes;
}

std::vector<int32_t> decode_token_ids(std::span<const uint8_t> b, size_t max_tokens) {
  if (b.size() % 4 != 0) {
    throw Error(ErrorCode::corrupt_input,
                "token_ids blob holds " + std::to_string(b.size()) + " bytes, not a multiple of 4");
  }
  if (b.size() / 4 > max_tokens) {
    throw Error(ErrorCode::corrupt_input, "token_ids blob holds " + std::to_string(b.size() / 4) +
                                              " tokens, over the limit " +
                                              std::to_string(max_tokens));
  }
  std::vector<int32_t> tokens(b.size() / 4);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(wire::load_le(&b[i * 4], 4));
  }
  return tokens;
}

}  // namespace cachegen
