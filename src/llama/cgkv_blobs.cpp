// The two llama-specific blobs of a .cgkv file (docs/FORMAT.md, "llama.cpp state blobs"):
// app_state (binary "CGLS" v1: everything build_state needs besides K/V data and tokens) and
// metadata_json (the model identity). Readers treat both as hostile: every count is bounded
// against ParseOptions and the bytes left before anything is allocated.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

#include "cachegen/error.h"
#include "llama/cgkv_blobs.h"
#include "llama/state_internal.h"

namespace cachegen::llama::detail {
namespace {

// "CGLS" read as a little-endian u32; frozen in the format.
constexpr uint32_t kAppStateMagic = 0x534c4743u;
constexpr uint16_t kAppStateVersion = 1;
constexpr uint8_t kFlagCellExt = 1;
constexpr uint8_t kCellsExplicit = 0;
constexpr uint8_t kCellsRun = 1;  // pos = first_pos + i, seq_ids = {run_seq_id}, ext default
constexpr const char* kMetadataFormat = "cachegen.llama";

[[noreturn]] void bad_meta(const std::string& why) {
  throw Error(ErrorCode::corrupt_input, "cgkv metadata_json blob: " + why);
}

// Cells form the common run: consecutive positions, one shared sequence id, default ext.
bool is_run(const std::vector<KvCell>& cells) {
  if (!consecutive_positions(cells)) return false;
  const KvCell& c0 = cells[0];
  for (const KvCell& c : cells) {
    if (c.seq_ids.size() != 1 || c.seq_ids[0] != c0.seq_ids.at(0)) return false;
    if (c.ext != KvCell{}.ext) return false;
  }
  return true;
}

}  // namespace

bool consecutive_positions(const std::vector<KvCell>& cells) {
  for (size_t i = 0; i < cells.size(); ++i) {
    if (int64_t{cells[i].pos} != int64_t{cells[0].pos} + static_cast<int64_t>(i)) return false;
  }
  return !cells.empty();
}

namespace {

void write_cells(const KvSnapshot& s, const KvStream& stream, wire::Writer& out) {
  if (is_run(stream.cells)) {
    out.u32(kCellsRun);
    out.i32(stream.cells[0].pos);
    out.i32(stream.cells[0].seq_ids[0]);
    return;
  }
  out.u32(kCellsExplicit);
  for (const KvCell& cell : stream.cells) {
    out.i32(cell.pos);
    out.u32(static_cast<uint32_t>(cell.seq_ids.size()));
    if (s.cell_ext) {
      for (int32_t e : cell.ext) out.i32(e);
    }
    for (int32_t id : cell.seq_ids) out.i32(id);
  }
}

void read_cells(wire::Reader& in, uint32_t n_cells, const ParseOptions& limits, bool cell_ext,
                KvStream& stream) {
  const uint32_t encoding = in.u32("app_state.cells_encoding");
  if (encoding == kCellsRun) {
    const int32_t first = in.i32("app_state.first_pos");
    const int32_t seq = in.i32("app_state.run_seq_id");
    if (int64_t{first} + n_cells - 1 > INT32_MAX) {
      in.corrupt("app_state.first_pos", "positions overflow i32");
    }
    stream.cells.resize(n_cells);
    for (uint32_t i = 0; i < n_cells; ++i) {
      stream.cells[i].pos = first + static_cast<int32_t>(i);
      stream.cells[i].seq_ids = {seq};
    }
    return;
  }
  if (encoding != kCellsExplicit) {
    in.corrupt("app_state.cells_encoding", "unknown value " + std::to_string(encoding));
  }
  in.need(checked_mul(n_cells, cell_ext ? 20 : 8, "app_state.cells"), "app_state.cells");
  stream.cells.resize(n_cells);
  for (KvCell& cell : stream.cells) {
    cell.pos = in.i32("app_state.cell.pos");
    const uint32_t n_seq = in.u32("app_state.cell.n_seq_id");
    if (n_seq > limits.max_seq_ids_per_cell) {
      in.corrupt("app_state.cell.n_seq_id", std::to_string(n_seq) + " exceeds the limit " +
                                                std::to_string(limits.max_seq_ids_per_cell));
    }
    if (cell_ext) {
      for (int32_t& e : cell.ext) e = in.i32("app_state.cell.ext");
    }
    in.need(uint64_t{n_seq} * 4, "app_state.cell.seq_id");
    cell.seq_ids.resize(n_seq);
    for (int32_t& id : cell.seq_ids) id = in.i32("app_state.cell.seq_id");
  }
}

}  // namespace

std::vector<uint8_t> encode_app_state(const KvSnapshot& s) {
  std::vector<uint8_t> bytes;
  wire::Writer out(bytes);
  out.u32(kAppStateMagic);
  out.u16(kAppStateVersion);
  out.u8(static_cast<uint8_t>(s.kind));
  out.u8(s.cell_ext ? kFlagCellExt : uint8_t{0});
  out.i32(s.seq_id);
  out.u32(static_cast<uint32_t>(s.arch_tag.size()));
  out.bytes(std::span(reinterpret_cast<const uint8_t*>(s.arch_tag.data()), s.arch_tag.size()));
  out.u32(static_cast<uint32_t>(s.streams.size()));
  for (const KvStream& stream : s.streams) {
    out.u32(static_cast<uint32_t>(stream.cells.size()));
    if (stream.cells.empty()) continue;
    out.u32(stream.v_trans ? 1 : 0);
    out.u32(static_cast<uint32_t>(stream.layers.size()));
    write_cells(s, stream, out);
    for (const KvLayer& l : stream.layers) {
      out.i32(l.k_type);
      out.u64(l.k_row_bytes);
      out.i32(l.v_type);
      out.u64(l.v_row_bytes);
      out.u32(l.v_elem_bytes);
      out.u32(l.n_embd_v);
    }
  }
  return bytes;
}

KvSnapshot decode_app_state(std::span<const uint8_t> bytes, const ParseOptions& limits) {
  wire::Reader in(bytes, "cgkv app_state blob");
  if (in.u32("app_state.magic") != kAppStateMagic) {
    in.corrupt("app_state.magic", "not a cachegen llama.cpp state blob ('CGLS')");
  }
  const uint16_t version = in.u16("app_state.version");
  if (version != kAppStateVersion) {
    throw Error(ErrorCode::unsupported_version,
                "cgkv app_state blob: version " + std::to_string(version) + ", this build reads " +
                    std::to_string(kAppStateVersion));
  }
  const uint8_t kind = in.u8("app_state.kind"), flags = in.u8("app_state.flags");
  if (kind > 1)
    in.corrupt("app_state.kind", "must be 0 (sequence) or 1 (context), is " + std::to_string(kind));
  if ((flags & ~kFlagCellExt) != 0) in.corrupt("app_state.flags", "reserved bits set");
  KvSnapshot s;
  s.kind = static_cast<StateKind>(kind);
  s.cell_ext = (flags & kFlagCellExt) != 0;
  s.seq_id = in.i32("app_state.seq_id");
  const uint32_t arch_len = in.u32("app_state.arch_len");
  if (arch_len > 256) in.corrupt("app_state.arch_len", std::to_string(arch_len) + " exceeds 256");
  const std::span<const uint8_t> arch = in.take(arch_len, "app_state.arch");
  s.arch_tag.assign(arch.begin(), arch.end());
  const uint32_t n_streams = in.u32("app_state.n_streams");
  if (n_streams == 0 || n_streams > limits.max_streams) {
    in.corrupt("app_state.n_streams",
               std::to_string(n_streams) + " outside 1.." + std::to_string(limits.max_streams));
  }
  in.need(uint64_t{n_streams} * 4, "app_state.streams");
  s.streams.resize(n_streams);
  for (KvStream& stream : s.streams) {
    const uint32_t n_cells = in.u32("app_state.n_cells");
    if (n_cells == 0) continue;
    if (n_cells > limits.max_cells) {
      in.corrupt("app_state.n_cells", std::to_string(n_cells) + " exceeds the limit " +
                                          std::to_string(limits.max_cells));
    }
    const uint32_t v_trans = in.u32("app_state.v_trans");
    if (v_trans > 1) in.corrupt("app_state.v_trans", "must be 0 or 1");
    stream.v_trans = v_trans == 1;
    const uint32_t n_layer = in.u32("app_state.n_layer");
    if (n_layer == 0 || n_layer > limits.max_layers) {
      in.corrupt("app_state.n_layer",
                 std::to_string(n_layer) + " outside 1.." + std::to_string(limits.max_layers));
    }
    read_cells(in, n_cells, limits, s.cell_ext, stream);
    in.need(checked_mul(n_layer, 32, "app_state.layers"), "app_state.layers");
    stream.layers.resize(n_layer);
    for (KvLayer& l : stream.layers) {
      l.k_type = in.i32("app_state.k_type");
      checked_type(in, l.k_type, "app_state.k_type");
      l.k_row_bytes = in.u64("app_state.k_row_bytes");
      l.v_type = in.i32("app_state.v_type");
      checked_type(in, l.v_type, "app_state.v_type");
      l.v_row_bytes = in.u64("app_state.v_row_bytes");
      l.v_elem_bytes = in.u32("app_state.v_elem_bytes");
      l.n_embd_v = in.u32("app_state.n_embd_v");
    }
  }
  size_t with_cells = 0;
  for (const KvStream& stream : s.streams) with_cells += stream.cells.empty() ? 0 : 1;
  if (with_cells != 1) {
    in.corrupt("app_state.n_cells", std::to_string(with_cells) + " streams hold cells, not 1");
  }
  if (in.remaining() != 0) {
    in.corrupt("app_state.end", std::to_string(in.remaining()) + " trailing bytes");
  }
  return s;
}

std::vector<uint8_t> encode_metadata(const ModelIdentity& id, const KvSnapshot& s) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(id.gguf_header_hash));
  const nlohmann::json j = {{"format", kMetadataFormat},
                            {"version", 1},
                            {"architecture", id.architecture},
                            {"n_layer", id.n_layer},
                            {"n_head_kv", id.n_head_kv},
                            {"head_dim", id.head_dim},
                            {"gguf_header_hash", hash},
                            {"state_kind", s.kind == StateKind::sequence ? "sequence" : "context"}};
  const std::string text = j.dump();
  return {text.begin(), text.end()};
}

ModelIdentity decode_metadata(std::span<const uint8_t> bytes) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::exception& e) {
    bad_meta(std::string("not JSON (") + e.what() + ")");
  }
  if (!j.is_object()) bad_meta("not a JSON object");
  if (!j.contains("format") || j["format"] != kMetadataFormat) {
    bad_meta(std::string("'format' is not \"") + kMetadataFormat + "\"");
  }
  if (!j.contains("version") || !j["version"].is_number_unsigned() || j["version"] != 1) {
    throw Error(ErrorCode::unsupported_version, "cgkv metadata_json blob: 'version' is not 1");
  }
  const auto u32_field = [&](const char* key) {
    if (!j.contains(key) || !j[key].is_number_unsigned() || j[key].get<uint64_t>() > UINT32_MAX) {
      bad_meta(std::string("'") + key + "' is missing or not an unsigned 32-bit integer");
    }
    return j[key].get<uint32_t>();
  };
  ModelIdentity id;
  if (!j.contains("architecture") || !j["architecture"].is_string() ||
      j["architecture"].get<std::string>().size() > 256) {
    bad_meta("'architecture' is missing or not a string of at most 256 bytes");
  }
  id.architecture = j["architecture"].get<std::string>();
  id.n_layer = u32_field("n_layer");
  id.n_head_kv = u32_field("n_head_kv");
  id.head_dim = u32_field("head_dim");
  const auto& h = j.contains("gguf_header_hash") ? j["gguf_header_hash"] : nlohmann::json();
  const std::string hex = h.is_string() ? h.get<std::string>() : std::string();
  if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    bad_meta("'gguf_header_hash' is not 16 lowercase hex digits");
  }
  id.gguf_header_hash = std::stoull(hex, nullptr, 16);
  return id;
}

}  // namespace cachegen::llama::detail
