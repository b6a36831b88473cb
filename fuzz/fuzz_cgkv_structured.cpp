// libFuzzer target with a structure-aware mutator for .cgkv files (docs/FORMAT.md,
// "Container"). Random byte flips almost never survive the header and chunk checksums, so
// LLVMFuzzerCustomMutator edits one structural element (a header field, a layer entry, a chunk
// or blob table entry, the bytes of one chunk or blob, growing or shrinking it and moving what
// follows) and then re-signs the file: file_bytes, every in-range chunk checksum (version 5:
// XXH3-64 of the 24-byte tag then the bytes; versions 2-4: XXH64 of the same; version 1: XXH64
// of the bytes alone), every in-range blob checksum and the header checksum. The target opens
// the file, verifies it, reads a token range and every blob. Seeds:
// fuzz/corpus/fuzz_cgkv_structured (the fuzz_cgkv_read seeds).
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "cachegen/container.h"
#include "cachegen/error.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

constexpr size_t kPreambleBytes = 32;
constexpr size_t kFixedBodyBytes = 36;  // n_layers .. reserved u16
constexpr size_t kChunkEntryBytes = 24;
constexpr size_t kBlobEntryBytes = 32;

uint64_t get(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}
void put(uint8_t* p, size_t n, uint64_t v) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Where the tables of a (possibly already mutated) file lie; nullopt when the header cannot be
// walked within the bytes present.
struct Layout {
  size_t header_bytes = 0;
  uint16_t version = 0;
  uint64_t n_tokens = 0, chunk_tokens = 0;
  size_t n_layers = 0, layers_at = 0;
  size_t n_chunks = 0, chunks_at = 0;
  size_t n_blobs = 0, blobs_at = 0;
};

std::optional<Layout> walk(const uint8_t* d, size_t size) {
  if (size < kPreambleBytes + kFixedBodyBytes) return std::nullopt;
  Layout l;
  l.version = static_cast<uint16_t>(get(d + 4, 2));
  l.header_bytes = get(d + 8, 4);
  if (l.header_bytes > size || l.header_bytes < kPreambleBytes + kFixedBodyBytes + 8) {
    return std::nullopt;
  }
  const uint8_t* b = d + kPreambleBytes;
  l.n_layers = get(b, 4);
  l.n_tokens = get(b + 16, 8);
  l.chunk_tokens = get(b + 24, 4);
  l.n_chunks = get(b + 28, 4);
  l.layers_at = kPreambleBytes + kFixedBodyBytes;
  const size_t limit = l.header_bytes - 8;
  if (l.n_layers > (limit - l.layers_at) / 4) return std::nullopt;
  size_t at = l.layers_at + 4 * l.n_layers;
  for (size_t i = 0; i < l.n_layers; ++i) {
    if (d[l.layers_at + 4 * i + 3] == 1) {
      at += 16;  // RoPE block
      break;
    }
  }
  if (at > limit || l.n_chunks > (limit - at) / kChunkEntryBytes) return std::nullopt;
  l.chunks_at = at;
  at += kChunkEntryBytes * l.n_chunks;
  if (limit - at < 4) return std::nullopt;
  l.n_blobs = get(d + at, 4);
  at += 4;
  if (l.n_blobs > (limit - at) / kBlobEntryBytes) return std::nullopt;
  l.blobs_at = at;
  return l;
}

// Re-signs everything the mutation may have invalidated (see the file comment).
void resign(uint8_t* d, size_t size, bool fix_file_bytes) {
  if (size >= kPreambleBytes && fix_file_bytes) put(d + 16, 8, size);
  const std::optional<Layout> l = walk(d, size);
  if (!l) return;
  for (size_t i = 0; i < l->n_chunks; ++i) {
    uint8_t* e = d + l->chunks_at + kChunkEntryBytes * i;
    const uint64_t off = get(e, 8), n = get(e + 8, 8);
    if (off > size || n > size - off) continue;
    if (l->version == 1) {
      put(e + 16, 8, XXH64(d + off, n, 0));
      continue;
    }
    const uint64_t first = l->chunk_tokens * i;
    const uint64_t count =
        first >= l->n_tokens ? 0 : std::min<uint64_t>(l->chunk_tokens, l->n_tokens - first);
    uint8_t tag[24];
    put(tag, 8, i);
    put(tag + 8, 8, first);
    put(tag + 16, 8, count);
    if (l->version >= 5) {
      XXH3_state_t* st = XXH3_createState();
      XXH3_64bits_reset(st);
      XXH3_64bits_update(st, tag, sizeof tag);
      XXH3_64bits_update(st, d + off, n);
      put(e + 16, 8, XXH3_64bits_digest(st));
      XXH3_freeState(st);
      continue;
    }
    XXH64_state_t* st = XXH64_createState();
    XXH64_reset(st, 0);
    XXH64_update(st, tag, sizeof tag);
    XXH64_update(st, d + off, n);
    put(e + 16, 8, XXH64_digest(st));
    XXH64_freeState(st);
  }
  for (size_t i = 0; i < l->n_blobs; ++i) {
    uint8_t* e = d + l->blobs_at + kBlobEntryBytes * i;
    const uint64_t off = get(e + 8, 8), n = get(e + 16, 8);
    if (off > size || n > size - off) continue;
    put(e + 24, 8, XXH64(d + off, n, 0));
  }
  put(d + l->header_bytes - 8, 8, XXH64(d, l->header_bytes - 8, 0));
}

// Values at and around the validation limits of docs/FORMAT.md.
uint64_t interesting(std::mt19937_64& rng, uint64_t old) {
  static const uint64_t kValues[] = {0,          1,
                                     2,          3,
                                     4,          7,
                                     8,          9,
                                     16,         31,
                                     32,         33,
                                     64,         255,
                                     256,        4096,
                                     4097,       65535,
                                     65536,      65537,
                                     1u << 24,   (1u << 24) + 1,
                                     1ull << 31, 1ull << 32,
                                     1ull << 40, (1ull << 40) + 1,
                                     ~0ull};
  switch (rng() % 4) {
    case 0:
      return kValues[rng() % std::size(kValues)];
    case 1:
      return old + 1;
    case 2:
      return old - 1;
    default:
      return old ^ (uint64_t{1} << (rng() % 64));
  }
}

// Replaces d[off, off+n) by a libFuzzer mutation of it, moving what follows and shifting every
// table offset that pointed past the range. Returns the new size. Only ranges after the header:
// the tables must stay where `l` says (a range over them once wrote past the buffer).
size_t mutate_range(std::vector<uint8_t>& buf, size_t size, size_t max_size, const Layout& l,
                    uint64_t off, uint64_t n) {
  if (off < l.header_bytes || off > size || n > size - off) return size;
  const size_t room = max_size > size ? max_size - size : 0;
  std::vector<uint8_t> part(buf.begin() + off, buf.begin() + off + n);
  const size_t cap = static_cast<size_t>(n) + std::min<size_t>(room, 256);
  part.resize(std::max<size_t>(cap, 1));
  const size_t new_n = LLVMFuzzerMutate(part.data(), static_cast<size_t>(n), part.size());
  part.resize(new_n);
  std::vector<uint8_t> out(buf.begin(), buf.begin() + off);
  out.insert(out.end(), part.begin(), part.end());
  out.insert(out.end(), buf.begin() + off + n, buf.begin() + size);
  const int64_t delta = static_cast<int64_t>(new_n) - static_cast<int64_t>(n);
  auto shift = [&](uint8_t* p) {
    const uint64_t o = get(p, 8);
    if (o > off) put(p, 8, o + delta);
  };
  for (size_t i = 0; i < l.n_chunks; ++i) shift(out.data() + l.chunks_at + kChunkEntryBytes * i);
  for (size_t i = 0; i < l.n_blobs; ++i) shift(out.data() + l.blobs_at + kBlobEntryBytes * i + 8);
  // The entry of the mutated range itself keeps its offset and takes the new length.
  for (size_t i = 0; i < l.n_chunks; ++i) {
    uint8_t* e = out.data() + l.chunks_at + kChunkEntryBytes * i;
    if (get(e, 8) == off && get(e + 8, 8) == n) put(e + 8, 8, new_n);
  }
  for (size_t i = 0; i < l.n_blobs; ++i) {
    uint8_t* e = out.data() + l.blobs_at + kBlobEntryBytes * i;
    if (get(e + 8, 8) == off && get(e + 16, 8) == n) put(e + 16, 8, new_n);
  }
  if (out.size() > max_size) return size;
  std::copy(out.begin(), out.end(), buf.begin());
  return out.size();
}

size_t structured_mutation(uint8_t* data, size_t size, size_t max_size, std::mt19937_64& rng) {
  const std::optional<Layout> l = walk(data, size);
  if (!l) return LLVMFuzzerMutate(data, size, max_size);
  switch (rng() % 8) {
    case 0: {  // a preamble or fixed header field
      static const struct {
        size_t at, n;
      } kFields[] = {{4, 2},  {6, 2},  {8, 4},  {12, 4}, {24, 8}, {32, 4}, {36, 4}, {40, 4},
                     {44, 4}, {48, 8}, {56, 4}, {60, 4}, {64, 1}, {65, 1}, {66, 2}};
      const auto& f = kFields[rng() % std::size(kFields)];
      put(data + f.at, f.n, interesting(rng, get(data + f.at, f.n)));
      return size;
    }
    case 1: {  // a layer entry byte (bits, flags, transform)
      if (l->n_layers == 0) break;
      uint8_t* e = data + l->layers_at + 4 * (rng() % l->n_layers) + rng() % 4;
      *e = static_cast<uint8_t>(rng() % 3 == 0 ? rng() : interesting(rng, *e));
      return size;
    }
    case 2: {  // a chunk table field
      if (l->n_chunks == 0) break;
      uint8_t* e = data + l->chunks_at + kChunkEntryBytes * (rng() % l->n_chunks) + 8 * (rng() % 2);
      put(e, 8, interesting(rng, get(e, 8)));
      return size;
    }
    case 3: {  // swap two chunk entries (the version-2 tag must catch it)
      if (l->n_chunks < 2) break;
      uint8_t* a = data + l->chunks_at + kChunkEntryBytes * (rng() % l->n_chunks);
      uint8_t* b = data + l->chunks_at + kChunkEntryBytes * (rng() % l->n_chunks);
      std::swap_ranges(a, a + kChunkEntryBytes, b);
      return size;
    }
    case 4: {  // a blob table field
      if (l->n_blobs == 0) break;
      uint8_t* e = data + l->blobs_at + kBlobEntryBytes * (rng() % l->n_blobs);
      const size_t field = rng() % 4;  // kind, reserved, offset, bytes
      const size_t at = field < 2 ? 4 * field : 8 * field - 8;
      const size_t n = field < 2 ? 4 : 8;
      put(e + at, n, interesting(rng, get(e + at, n)));
      return size;
    }
    case 5:
    case 6: {  // the bytes of one chunk (most of the decoder's surface)
      if (l->n_chunks == 0) break;
      std::vector<uint8_t> buf(data, data + max_size);
      const uint8_t* e = data + l->chunks_at + kChunkEntryBytes * (rng() % l->n_chunks);
      const size_t n = mutate_range(buf, size, max_size, *l, get(e, 8), get(e + 8, 8));
      std::memcpy(data, buf.data(), n);
      return n;
    }
    case 7: {  // the bytes of one blob
      if (l->n_blobs == 0) break;
      std::vector<uint8_t> buf(data, data + max_size);
      const uint8_t* e = data + l->blobs_at + kBlobEntryBytes * (rng() % l->n_blobs);
      const size_t n = mutate_range(buf, size, max_size, *l, get(e + 8, 8), get(e + 16, 8));
      std::memcpy(data, buf.data(), n);
      return n;
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  std::mt19937_64 rng(seed);
  // One in eight mutations stays unstructured and unsigned, so checksum and framing failures
  // keep being exercised too.
  if (rng() % 8 == 0) return LLVMFuzzerMutate(data, size, max_size);
  size = structured_mutation(data, size, max_size, rng);
  resign(data, size, rng() % 16 != 0);
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    cachegen::CgkvReader r =
        cachegen::CgkvReader::from_bytes(std::vector<uint8_t>(data, data + size));
    // Bound the work a forged header can ask for (2^22 fp16 values per read).
    r.set_max_elements(size_t{1} << 22);
    try {
      r.verify();
    } catch (const cachegen::Error&) {
    }
    const size_t n = r.info().n_tokens;
    if (n > 0) {
      // A range that starts inside the file and may cross chunk boundaries.
      const size_t begin = (size * 31) % n;
      const size_t end = std::min(n, begin + 1 + (size * 17) % 4096);
      try {
        (void)r.read_tokens(begin, end);
      } catch (const cachegen::Error&) {
      }
    }
    for (const auto& b : r.info().blobs) {
      try {
        (void)r.read_blob(b.kind);
      } catch (const cachegen::Error&) {
      }
    }
  } catch (const cachegen::Error&) {
  }
  return 0;
}
