// How RedisStore lays a value out in Redis. Frozen: changing it orphans stored values.
//
//   cgs:m:<key>                  the manifest: a 74-byte ASCII header, then, for a value of at
//                                most part_bytes, the value itself ("inline", parts == 0).
//   cgs:p:<key>:<gen>:<i>        part i (decimal, from 0) of generation <gen>; every part but the
//                                last holds exactly part_bytes bytes.
//
// Header: "CGS1 GGGGGGGGGGGGGGGG PPPPPPPP BBBBBBBB TTTTTTTTTTTTTTTT HHHHHHHHHHHHHHHH\n", fields in
// lower-case hex, fixed width, separated by one space: generation id (G, random 64 bits), part
// count (P), part size in bytes (B; 0 when inline), total value size in bytes (T), and XXH64
// (seed 0) of the whole value (H). ASCII so that `redis-cli GET` shows it plainly.
//
// Writers store every part under a fresh generation with an expiry (pending_part_ttl_ms), then
// swap the manifest in with one atomic script that makes those parts persistent (refusing if one
// has expired) and returns the old header; the writer then expires or deletes the old
// generation's parts. So a writer killed mid-put leaves only parts that expire, and a part that
// no manifest names and that has no expiry is garbage (Store::gc deletes it). A
// reader follows one manifest, checks part sizes, total size and XXH64, so a crashed writer
// (parts without a manifest) or a concurrent overwrite (parts deleted under the reader) can
// never be returned as a value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cachegen::store_detail {

inline constexpr size_t kManifestHeaderBytes = 74;

struct Manifest {
  uint64_t generation = 0;
  uint32_t parts = 0;       // 0: the value follows the header in the manifest itself
  uint32_t part_bytes = 0;  // 0 when parts == 0
  uint64_t total_bytes = 0;
  uint64_t xxh64 = 0;
};

std::string encode_manifest_header(const Manifest& m);

// Parses and cross-checks the first kManifestHeaderBytes of `bytes` (which may be longer).
// `where` names the key in messages. Throws Error(corrupt_input) naming the bad field.
Manifest parse_manifest_header(std::string_view bytes, const std::string& where);

std::string manifest_key(std::string_view key);
std::string part_key(std::string_view key, uint64_t generation, uint32_t index);

}  // namespace cachegen::store_detail
