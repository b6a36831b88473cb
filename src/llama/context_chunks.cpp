// The llama adapter of the context store (contract: cachegen/llama_context.h).
#include <cstdio>

#include "cachegen/error.h"
#include "cachegen/llama_context.h"
#include "cachegen/quality_levels.h"
#include "llama/cgkv_blobs.h"

namespace cachegen::llama {
namespace {

[[noreturn]] void corrupt(const std::string& why) {
  throw Error(ErrorCode::corrupt_input, "llama context chunk: " + why);
}

// Appends src's cells, tokens and K/V rows to dst (same layout, types and row sizes).
void append_snapshot(KvSnapshot& dst, const KvSnapshot& src) {
  KvStream& d = dst.data_stream();
  const KvStream& s = src.data_stream();
  if (d.v_trans != s.v_trans || d.layers.size() != s.layers.size() || dst.kind != src.kind) {
    corrupt("a chunk's state layout differs from the chunks before it");
  }
  for (size_t il = 0; il < d.layers.size(); ++il) {
    KvLayer& a = d.layers[il];
    const KvLayer& b = s.layers[il];
    if (a.k_type != b.k_type || a.v_type != b.v_type || a.k_row_bytes != b.k_row_bytes ||
        a.v_row_bytes != b.v_row_bytes) {
      corrupt("layer " + std::to_string(il) + " of a chunk has other K/V types than before");
    }
    a.k.insert(a.k.end(), b.k.begin(), b.k.end());
    a.v.insert(a.v.end(), b.v.begin(), b.v.end());
  }
  d.cells.insert(d.cells.end(), s.cells.begin(), s.cells.end());
  dst.tokens.insert(dst.tokens.end(), src.tokens.begin(), src.tokens.end());
}

}  // namespace

std::string context_fingerprint(const ModelIdentity& id) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(id.gguf_header_hash));
  return "llama:" + id.architecture + ":" + std::to_string(id.n_layer) + ":" +
         std::to_string(id.n_head_kv) + ":" + std::to_string(id.head_dim) + ":" + hash;
}

KvSnapshot slice_snapshot(const KvSnapshot& s, size_t first, size_t n) {
  const KvStream& st = s.data_stream();
  if (first + n > st.cells.size() || s.tokens.size() != st.cells.size()) {
    throw Error(ErrorCode::invalid_argument, "slice_snapshot: cells " + std::to_string(first) +
                                                 ".." + std::to_string(first + n) + " of " +
                                                 std::to_string(st.cells.size()));
  }
  KvSnapshot out = s;
  out.streams.clear();
  KvStream o;
  o.v_trans = st.v_trans;
  o.cells.assign(st.cells.begin() + static_cast<ptrdiff_t>(first),
                 st.cells.begin() + static_cast<ptrdiff_t>(first + n));
  for (const KvLayer& l : st.layers) {
    KvLayer c = l;
    c.k.assign(l.k.begin() + static_cast<ptrdiff_t>(first * l.k_row_bytes),
               l.k.begin() + static_cast<ptrdiff_t>((first + n) * l.k_row_bytes));
    c.v.assign(l.v.begin() + static_cast<ptrdiff_t>(first * l.v_row_bytes),
               l.v.begin() + static_cast<ptrdiff_t>((first + n) * l.v_row_bytes));
    o.layers.push_back(std::move(c));
  }
  out.streams.push_back(std::move(o));
  out.tokens.assign(s.tokens.begin() + static_cast<ptrdiff_t>(first),
                    s.tokens.begin() + static_cast<ptrdiff_t>(first + n));
  return out;
}

size_t store_chunks(ContextStore& store, const Model& model, const KvSnapshot& snapshot,
                    std::span<const int32_t> tokens, size_t from_chunk,
                    std::span<const QualityLevel> levels) {
  const size_t ct = store.chunk_tokens();
  const size_t n_chunks = std::min(tokens.size(), snapshot.n_cells()) / ct;
  const std::vector<ChunkKey> keys = store.chunk_keys(tokens.subspan(0, n_chunks * ct));
  size_t written = 0;
  for (size_t i = from_chunk; i < n_chunks; ++i) {
    const KvSnapshot chunk = slice_snapshot(snapshot, i * ct, ct);
    if (!std::equal(chunk.tokens.begin(), chunk.tokens.end(),
                    tokens.begin() + static_cast<ptrdiff_t>(i * ct))) {
      throw Error(ErrorCode::invalid_argument,
                  "store_chunks: the snapshot's token ids are not the given tokens");
    }
    for (QualityLevel level : levels) {
      store.put_chunk(keys[i], i, quality_level_name(level), snapshot_to_cgkv(chunk, model, level));
    }
    ++written;
  }
  return written;
}

void SnapshotAssembler::decode(const StoredChunk& chunk, std::string_view,
                               std::span<const uint8_t> value) {
  const CgkvReader reader =
      CgkvReader::from_bytes(std::vector<uint8_t>(value.begin(), value.end()));
  const std::optional<ModelIdentity> id = cgkv_model_identity(reader);
  if (!id || !(*id == model_.identity())) {
    corrupt("chunk " + std::to_string(chunk.index) + " was written for another model");
  }
  KvSnapshot s = cgkv_to_snapshot(reader, model_);
  const KvStream& st = s.data_stream();
  if (st.cells.size() != chunk.n_tokens || s.tokens.size() != chunk.n_tokens) {
    corrupt("chunk " + std::to_string(chunk.index) + " holds " + std::to_string(st.cells.size()) +
            " cells, not " + std::to_string(chunk.n_tokens));
  }
  for (size_t i = 0; i < st.cells.size(); ++i) {
    if (st.cells[i].pos != static_cast<int64_t>(chunk.first_token + i)) {
      corrupt("chunk " + std::to_string(chunk.index) + " cell " + std::to_string(i) +
              " is at position " + std::to_string(st.cells[i].pos) + ", not " +
              std::to_string(chunk.first_token + i));
    }
  }
  if (!have_) {
    if (chunk.first_token != 0) corrupt("the first chunk decoded must be chunk 0");
    snapshot_ = std::move(s);
    have_ = true;
  } else {
    if (chunk.first_token != snapshot_.n_cells()) corrupt("chunks must be decoded in order");
    append_snapshot(snapshot_, s);
  }
}

}  // namespace cachegen::llama
