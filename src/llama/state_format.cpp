// Parsing and rebuilding llama.cpp's KV state bytes; the layout is documented in
// cachegen/llama.h and follows llama_kv_cache::state_write_meta/_data (llama-kv-cache.cpp)
// and llama_context::state_write_data (llama-context.cpp) of the pinned llama.cpp.
#include <ggml.h>

#include <string>
#include <utility>

#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "core/wire.h"
#include "llama/state_internal.h"

namespace cachegen::llama {
namespace detail {

const ggml_type_traits& checked_type(wire::Reader& in, int32_t type, const char* field) {
  if (type < 0 || type >= GGML_TYPE_COUNT)
    in.corrupt(field, "unknown ggml type " + std::to_string(type));
  const ggml_type_traits* t = ggml_get_type_traits(static_cast<ggml_type>(type));
  if (t == nullptr || t->blck_size <= 0 || t->type_size == 0) {
    in.corrupt(field, "ggml type " + std::to_string(type) + " has no storage layout");
  }
  return *t;
}

namespace {

// A row of `row_bytes` must hold a whole number of blocks of `type`.
void check_row_bytes(wire::Reader& in, const ggml_type_traits& t, uint64_t row_bytes,
                     const char* field) {
  if (row_bytes == 0 || row_bytes % t.type_size != 0 || row_bytes > (uint64_t{1} << 32)) {
    in.corrupt(field, std::to_string(row_bytes) + " is not a whole number of " + t.type_name +
                          " blocks of " + std::to_string(t.type_size) + " bytes");
  }
}

std::vector<uint8_t> copy_rows(wire::Reader& in, uint64_t n_cells, uint64_t row_bytes,
                               const char* field) {
  const std::span<const uint8_t> b = in.take(checked_mul(n_cells, row_bytes, field), field);
  return {b.begin(), b.end()};
}

void parse_cells(wire::Reader& in, uint32_t cell_count, const ParseOptions& options, bool cell_ext,
                 KvStream& stream) {
  // Smallest possible cell: pos + n_seq_id (+ ext): bound before reserving.
  in.need(checked_mul(cell_count, cell_ext ? 20 : 8, "cells"), "cells");
  stream.cells.resize(cell_count);
  for (KvCell& cell : stream.cells) {
    cell.pos = in.i32("cell.pos");
    const uint32_t n_seq_id = in.u32("cell.n_seq_id");
    if (n_seq_id > options.max_seq_ids_per_cell) {
      in.corrupt("cell.n_seq_id", std::to_string(n_seq_id) + " exceeds the limit " +
                                      std::to_string(options.max_seq_ids_per_cell));
    }
    if (cell_ext) {
      for (int32_t& e : cell.ext) e = in.i32("cell.ext");
    }
    in.need(uint64_t{n_seq_id} * 4, "cell.seq_id");
    cell.seq_ids.resize(n_seq_id);
    for (int32_t& s : cell.seq_ids) s = in.i32("cell.seq_id");
  }
}

void parse_layers(wire::Reader& in, uint64_t n_cells, const ParseOptions& options,
                  KvStream& stream) {
  const uint32_t v_trans = in.u32("v_trans");
  if (v_trans > 1) in.corrupt("v_trans", "must be 0 or 1, is " + std::to_string(v_trans));
  stream.v_trans = v_trans == 1;
  const uint32_t n_layer = in.u32("n_layer");
  if (n_layer == 0 || n_layer > options.max_layers) {
    in.corrupt("n_layer",
               std::to_string(n_layer) + " outside 1.." + std::to_string(options.max_layers));
  }
  // Each layer needs at least its K and V headers (12 + 12 bytes): bound before allocating.
  in.need(checked_mul(n_layer, 24, "layers"), "layers");
  stream.layers.resize(n_layer);
  for (KvLayer& layer : stream.layers) {
    layer.k_type = in.i32("k_type");
    const ggml_type_traits& t = checked_type(in, layer.k_type, "k_type");
    layer.k_row_bytes = in.u64("k_row_bytes");
    check_row_bytes(in, t, layer.k_row_bytes, "k_row_bytes");
    layer.k = copy_rows(in, n_cells, layer.k_row_bytes, "k_data");
  }
  for (KvLayer& layer : stream.layers) {
    layer.v_type = in.i32("v_type");
    const ggml_type_traits& t = checked_type(in, layer.v_type, "v_type");
    if (!stream.v_trans) {
      layer.v_row_bytes = in.u64("v_row_bytes");
      check_row_bytes(in, t, layer.v_row_bytes, "v_row_bytes");
      layer.v = copy_rows(in, n_cells, layer.v_row_bytes, "v_data");
      continue;
    }
    layer.v_elem_bytes = in.u32("v_elem_bytes");
    layer.n_embd_v = in.u32("n_embd_v");
    // llama.cpp transposes V only for types with one element per block.
    if (t.blck_size != 1 || layer.v_elem_bytes != t.type_size) {
      in.corrupt("v_elem_bytes", std::to_string(layer.v_elem_bytes) +
                                     " does not match transposable " + t.type_name + " (" +
                                     std::to_string(t.type_size) + " bytes)");
    }
    if (layer.n_embd_v == 0 || layer.n_embd_v > (1u << 24)) {
      in.corrupt("n_embd_v", std::to_string(layer.n_embd_v) + " outside 1..2^24");
    }
    const uint64_t el = layer.v_elem_bytes;
    layer.v_row_bytes = el * layer.n_embd_v;
    const std::span<const uint8_t> src =
        in.take(checked_mul(n_cells, layer.v_row_bytes, "v_data"), "v_data");
    // Serialised [n_embd_v][n_cells] elements; stored token-major [n_cells][n_embd_v].
    layer.v.resize(src.size());
    for (uint64_t j = 0; j < layer.n_embd_v; ++j) {
      for (uint64_t c = 0; c < n_cells; ++c) {
        std::memcpy(&layer.v[(c * layer.n_embd_v + j) * el], &src[(j * n_cells + c) * el], el);
      }
    }
  }
}

}  // namespace

void parse_kv_block(wire::Reader& in, const ParseOptions& options, bool cell_ext,
                    std::vector<KvStream>& streams) {
  const uint32_t n_stream = in.u32("n_stream");
  if (n_stream == 0 || n_stream > options.max_streams) {
    in.corrupt("n_stream",
               std::to_string(n_stream) + " outside 1.." + std::to_string(options.max_streams));
  }
  in.need(uint64_t{n_stream} * 4, "streams");
  streams.resize(n_stream);
  for (KvStream& stream : streams) {
    const uint32_t cell_count = in.u32("cell_count");
    if (cell_count == 0) continue;
    if (cell_count > options.max_cells) {
      in.corrupt("cell_count", std::to_string(cell_count) + " exceeds the limit " +
                                   std::to_string(options.max_cells));
    }
    parse_cells(in, cell_count, options, cell_ext, stream);
    parse_layers(in, cell_count, options, stream);
  }
}

void check_layer_sizes(const KvStream& stream) {
  const uint64_t n = stream.cells.size();
  for (size_t il = 0; il < stream.layers.size(); ++il) {
    const KvLayer& layer = stream.layers[il];
    uint64_t k_bytes, v_bytes;
    if (__builtin_mul_overflow(n, layer.k_row_bytes, &k_bytes) || layer.k.size() != k_bytes ||
        __builtin_mul_overflow(n, layer.v_row_bytes, &v_bytes) || layer.v.size() != v_bytes) {
      throw Error(ErrorCode::invalid_argument,
                  "llama state: layer " + std::to_string(il) + " holds K/V of " +
                      std::to_string(layer.k.size()) + "/" + std::to_string(layer.v.size()) +
                      " bytes, expected n_cells * k_row_bytes / n_cells * v_row_bytes");
    }
  }
}

void build_kv_block(const KvSnapshot& s, wire::Writer& out) {
  out.u32(static_cast<uint32_t>(s.streams.size()));
  for (const KvStream& stream : s.streams) {
    const uint64_t n = stream.cells.size();
    out.u32(static_cast<uint32_t>(n));
    if (n == 0) continue;
    for (const KvCell& cell : stream.cells) {
      out.i32(cell.pos);
      out.u32(static_cast<uint32_t>(cell.seq_ids.size()));
      if (s.cell_ext) {
        for (int32_t e : cell.ext) out.i32(e);
      }
      for (int32_t id : cell.seq_ids) out.i32(id);
    }
    out.u32(stream.v_trans ? 1 : 0);
    out.u32(static_cast<uint32_t>(stream.layers.size()));
    check_layer_sizes(stream);
    for (const KvLayer& layer : stream.layers) {
      out.i32(layer.k_type);
      out.u64(layer.k_row_bytes);
      out.bytes(layer.k);
    }
    for (const KvLayer& layer : stream.layers) {
      out.i32(layer.v_type);
      if (!stream.v_trans) {
        out.u64(layer.v_row_bytes);
        out.bytes(layer.v);
        continue;
      }
      const uint64_t el = layer.v_elem_bytes;
      if (el == 0 || el * layer.n_embd_v != layer.v_row_bytes) {
        throw Error(ErrorCode::invalid_argument,
                    "llama state: transposed V needs v_elem_bytes * n_embd_v == v_row_bytes");
      }
      out.u32(layer.v_elem_bytes);
      out.u32(layer.n_embd_v);
      for (uint64_t j = 0; j < layer.n_embd_v; ++j) {
        for (uint64_t c = 0; c < n; ++c) {
          out.bytes(std::span<const uint8_t>(&layer.v[(c * layer.n_embd_v + j) * el], el));
        }
      }
    }
  }
}

}  // namespace detail

KvSnapshot detail::parse_state(std::span<const uint8_t> bytes, const ParseOptions& options,
                               StateKind kind, bool seq_header) {
  wire::Reader in(bytes, "llama state");
  KvSnapshot s;
  s.kind = kind;
  s.cell_ext = options.cell_ext;
  if (kind == StateKind::sequence && seq_header) {
    const uint32_t magic = in.u32("seq_magic");
    if (magic != kSeqStateMagic) in.corrupt("seq_magic", "not a llama.cpp sequence state");
    s.seq_id = in.i32("seq_id");
  }
  if (kind == StateKind::context) {
    const uint32_t len = in.u32("arch_len");
    if (len > 256) in.corrupt("arch_len", std::to_string(len) + " exceeds 256");
    const std::span<const uint8_t> name = in.take(len, "arch");
    s.arch_tag.assign(name.begin(), name.end());
  }
  detail::parse_kv_block(in, options, s.cell_ext, s.streams);
  if (in.remaining() != 0) {
    in.corrupt("end",
               std::to_string(in.remaining()) +
                   " trailing bytes (a memory layout this adapter does not read: iSWA, hybrid, "
                   "recurrent, or V-less layers?)");
  }
  return s;
}

KvSnapshot parse_seq_state(std::span<const uint8_t> bytes, const ParseOptions& options) {
  return detail::parse_state(bytes, options, StateKind::sequence, true);
}

KvSnapshot parse_context_state(std::span<const uint8_t> bytes, const ParseOptions& options) {
  return detail::parse_state(bytes, options, StateKind::context, false);
}

void detail::build_state_into(const KvSnapshot& snapshot, bool seq_header, wire::Writer& out) {
  if (snapshot.kind == StateKind::sequence && seq_header) {
    out.u32(kSeqStateMagic);
    out.i32(snapshot.seq_id);
  }
  if (snapshot.kind == StateKind::context) {
    out.u32(static_cast<uint32_t>(snapshot.arch_tag.size()));
    out.bytes(std::span(reinterpret_cast<const uint8_t*>(snapshot.arch_tag.data()),
                        snapshot.arch_tag.size()));
  }
  build_kv_block(snapshot, out);
}

std::vector<uint8_t> build_state(const KvSnapshot& snapshot) {
  std::vector<uint8_t> bytes;
  wire::Writer out(bytes);
  detail::build_state_into(snapshot, true, out);
  return bytes;
}

const KvStream& KvSnapshot::data_stream() const {
  const KvStream* found = nullptr;
  for (const KvStream& s : streams) {
    if (s.cells.empty()) continue;
    if (found != nullptr) {
      throw Error(ErrorCode::invalid_argument, "llama state: several streams hold cells");
    }
    found = &s;
  }
  if (found == nullptr) throw Error(ErrorCode::invalid_argument, "llama state: no cells");
  return *found;
}

KvStream& KvSnapshot::data_stream() {
  return const_cast<KvStream&>(std::as_const(*this).data_stream());
}

}  // namespace cachegen::llama
