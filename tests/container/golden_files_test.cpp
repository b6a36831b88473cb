// Golden and must-reject files (zstd's golden-decompression / golden-errors habit).
//
// tests/data/golden_files/: .cgkv files and raw codec streams written by the format as it is,
// each listed in manifest.json with what it must decode to (shapes and the XXH64 of the decoded
// fp16 bytes, little-endian). A change that stops old files decoding to the same values fails
// here. tests/data/must_reject/: inputs every reader must refuse, each with its exact ErrorCode
// in manifest.json.
//
// Both folders are regenerated only on purpose: CACHEGEN_UPDATE_GOLDEN_FILES=1 rewrites the
// generated files and both manifests (files no writer writes any more, named vN_ for their
// version, are kept and only re-measured: version-1 .cgkv files, copied from the fuzz corpus;
// v2_lossless.cgkv, lossless methods 0/1 in a version-2 file; and the generated files as
// versions 2-6 wrote them: 2-4 with XXH64 chunk checksums). Review the change before committing.
#include <gtest/gtest.h>

#include <xxhash.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "cachegen/codec.h"
#include "cachegen/container.h"
#include "cachegen/error.h"
#include "cachegen/npy.h"
#include "cachegen/profile.h"
#include "codec/stream_format.h"
#include "container/container_test_util.h"

namespace cachegen {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;
using nlohmann::json;

const fs::path kGolden = fs::path(CACHEGEN_TEST_DATA_DIR) / "golden_files";
const fs::path kReject = fs::path(CACHEGEN_TEST_DATA_DIR) / "must_reject";

bool updating() {
  const char* v = std::getenv("CACHEGEN_UPDATE_GOLDEN_FILES");
  return v && std::string(v) == "1";
}

Bytes load(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("missing " + p.string());
  return Bytes(std::istreambuf_iterator<char>(in), {});
}
void store(const fs::path& p, const Bytes& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::string hex64(uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(v));
  return s;
}
// XXH64 of fp16 values as little-endian bytes (the same on every host).
std::string half_hash(std::span<const Half> h) {
  Bytes b(2 * h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    b[2 * i] = static_cast<uint8_t>(h[i].bits);
    b[2 * i + 1] = static_cast<uint8_t>(h[i].bits >> 8);
  }
  return hex64(XXH64(b.data(), b.size(), 0));
}
std::string bytes_hash(std::span<const uint8_t> b) {
  return hex64(XXH64(b.data(), b.size(), 0));
}

// ---- What a file decodes to ------------------------------------------------------------

// Everything a .cgkv reader reports that a format change could move.
// The profile the golden transform file was written with (stored before it is described).
std::shared_ptr<const KvProfile> golden_profile() {
  return std::make_shared<const KvProfile>(
      KvProfile::parse(load(kGolden / "profile_small.cgprof")));
}

json describe_cgkv(const Bytes& file) {
  CgkvReader r = CgkvReader::from_bytes(file);
  if (r.info().codec == ContainerCodec::transform) r.set_profile(golden_profile());
  r.verify();
  const CgkvInfo& in = r.info();
  json layers = json::array();
  for (const CgkvLayerInfo& l : in.layers) {
    layers.push_back(
        {l.key_bits, l.value_bits, l.attention, l.recomputed, static_cast<int>(l.key_transform)});
  }
  json d = {{"version", in.version},
            {"n_layers", in.n_layers},
            {"n_kv_heads", in.n_kv_heads},
            {"head_dim", in.head_dim},
            {"group_size", in.group_size},
            {"n_tokens", in.n_tokens},
            {"chunk_tokens", in.chunk_tokens},
            {"codec", static_cast<int>(in.codec)},
            {"layers", layers},
            {"has_rope", in.has_rope},
            {"profile_id", in.profile_id},
            {"all_tokens_xxh64", half_hash(r.read_tokens(0, in.n_tokens))}};
  // A range across a chunk boundary exercises the partial read.
  const size_t b = in.n_tokens / 3, e = in.n_tokens - in.n_tokens / 4;
  d["range"] = {b, e, half_hash(r.read_tokens(b, e))};
  json blobs = json::object();
  for (const CgkvBlobInfo& bl : in.blobs) {
    blobs[std::to_string(bl.kind)] = bytes_hash(*r.read_blob(bl.kind));
  }
  d["blobs"] = blobs;
  return d;
}

json describe_stream(const Bytes& s) {
  const CodeStream c = decode(s);
  return {{"n_rows", c.n_rows},
          {"dim", c.dim},
          {"bits", c.bits},
          {"group_size", c.group_size},
          {"codes_xxh64", bytes_hash(c.codes)},
          {"half_xxh64", half_hash(decode_to_half(s))}};
}

json describe_batch(const Bytes& s) {
  json heads = json::array();
  std::vector<Half> all;
  for (const CodeStream& c : decode_batch(s)) {
    heads.push_back({c.n_rows, c.dim, c.bits, c.group_size, bytes_hash(c.codes)});
    const std::vector<Half> h = dequant_codes(c);
    all.insert(all.end(), h.begin(), h.end());
  }
  return {{"heads", heads},
          {"half_xxh64", half_hash(all)},
          {"layout", detail::batch_layout(s).value()}};
}

json describe(const std::string& kind, const Bytes& b) {
  if (kind == "cgkv") return describe_cgkv(b);
  if (kind == "codec_stream") return describe_stream(b);
  if (kind == "codec_batch") return describe_batch(b);
  if (kind == "profile") {
    const KvProfile p = KvProfile::parse(b);
    return {{"id", p.id()}, {"n_layers", p.n_layers}, {"block", p.block}};
  }
  if (kind == "npy") {
    const NpyArray a = parse_npy(b);
    return {{"shape", a.shape}, {"data_xxh64", bytes_hash(a.data)}};
  }
  throw std::runtime_error("unknown kind " + kind);
}

// ---- The golden inputs (only run when regenerating) ------------------------------------

std::vector<float> lcg_walk(size_t n, uint32_t seed, size_t dim) {
  std::vector<float> x(n);
  uint32_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const float noise = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
    x[i] = (i >= dim ? x[i - dim] : static_cast<float>(i % dim) * 0.25f) + noise;
  }
  return x;
}

// The quality-level shape of a file: attention layer 0 recomputed, keys pre-RoPE, token ids.
KVCacheConfig level_config() {
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  cfg.layer_bits = {0, 5};
  cfg.value_layer_bits = {0, 3};
  cfg.key_pre_rope = true;
  cfg.rope.freq_base = 10000.0f;
  cfg.rope.neox = true;
  cfg.rope_position_offset = 3;
  return cfg;
}

CgkvBlob token_ids(size_t n) {
  CgkvBlob b{static_cast<uint32_t>(BlobKind::token_ids), {}};
  for (size_t i = 0; i < n; ++i) {
    const uint32_t id = static_cast<uint32_t>(1 + (i * 37) % 500);
    for (int k = 0; k < 4; ++k) b.bytes.push_back(static_cast<uint8_t>(id >> (8 * k)));
  }
  return b;
}

struct Golden {
  std::string file, kind;
  Bytes bytes;
};

std::vector<Golden> generate_golden() {
  std::vector<Golden> g;
  constexpr size_t kT = 100;
  {
    KVCacheConfig cfg;
    cfg.block_tokens = 64;
    g.push_back(
        {"quantized_schedule_4bit.cgkv", "cgkv", write_cgkv(test::filled_cache(kT, cfg).cache)});
  }
  {
    KVCacheConfig cfg;
    cfg.base_bits = 2;
    cfg.group_size = 16;
    cfg.block_tokens = 48;
    cfg.params = ParamMode::reference;
    const CgkvBlob meta{static_cast<uint32_t>(BlobKind::metadata_json),
                        {'{', '"', 'a', '"', ':', '1', '}'}};
    g.push_back({"quantized_reference_2bit.cgkv", "cgkv",
                 write_cgkv(test::filled_cache(kT, cfg, 5).cache, std::vector<CgkvBlob>{meta})});
  }
  g.push_back({"level_prerope_recompute.cgkv", "cgkv",
               write_cgkv(test::filled_cache(kT, level_config(), 9).cache,
                          std::vector<CgkvBlob>{token_ids(kT)})});
  {
    // Lossless method 2 with repeated and rotated rows (rows 10..19 of every V repeat rows 0..9,
    // as a repeated token's do; those of every K are rows 0..9 rotated 10 positions further, as
    // RoPE rotates a repeated token's key), and a 9-token last chunk.
    KVCacheConfig cfg;
    test::Filled f = test::filled_cache(41, cfg, 3);
    const size_t row = 16, plane = 41 * row;
    for (size_t t = 0; t < 4; ++t) {
      Half* x = f.kv.data() + t * plane;
      if (t % 2) {
        std::memcpy(x + 10 * row, x, 10 * row * 2);
        continue;
      }
      for (size_t i = 0; i < 10 * row; i += 2) {
        const double theta = 10 * std::pow(1e4, -2.0 * static_cast<double>((i % 8) / 2) / 8);
        const double x0 = half_to_float(x[i]), x1 = half_to_float(x[i + 1]);
        x[10 * row + i] =
            float_to_half(static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta)));
        x[10 * row + i + 1] =
            float_to_half(static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta)));
      }
    }
    g.push_back({"lossless_repeated_rows.cgkv", "cgkv",
                 write_cgkv_lossless(test::small_shape(), f.kv, 41, 32,
                                     std::vector<CgkvBlob>{token_ids(41)})});
  }
  {
    // Lossless, channels drifting slowly at amplitudes of their own: high bytes as one table
    // over the differences from the row above (high form 2, version 7), two chunks.
    const size_t T = 150, row = 16;
    std::vector<Half> kv(4 * T * row);
    std::mt19937 rng(17);
    std::normal_distribution<float> n01;
    for (size_t t = 0; t < 4; ++t) {
      for (size_t c = 0; c < row; ++c) {
        float walk = 0;
        const float amp = 0.1f + static_cast<float>((c + t) % 7);
        for (size_t i = 0; i < T; ++i) {
          walk += 0.1f * n01(rng);
          kv[(t * T + i) * row + c] = float_to_half(amp * (walk + 0.05f * n01(rng)));
        }
      }
    }
    g.push_back({"lossless_drifting_rows.cgkv", "cgkv",
                 write_cgkv_lossless(test::small_shape(), kv, T, 128)});
  }
  {
    // A calibration profile fitted to a small cache, and a transform file written with it
    // (keys pre-RoPE, layer 0 recomputed, sinks, per-component steps).
    test::Filled f = test::filled_cache(kT, KVCacheConfig{}, 13);
    std::vector<float> kv(f.kv.size());
    for (size_t i = 0; i < kv.size(); ++i) kv[i] = half_to_float(f.kv[i]);
    ProfileFitter fit(3, 2, 8, 16, {1, 0, 1});
    const size_t plane = kT * 16;
    for (size_t t = 0; t < 4; ++t) {
      fit.add(t < 2 ? 0 : 2, static_cast<int>(t % 2),
              std::span<const float>(kv).subspan(t * plane, plane));
    }
    KvProfile p = fit.finish();
    p.model_fingerprint = "golden";
    p.key_pre_rope = true;
    p.rope.freq_base = 10000.0f;
    for (size_t t : {size_t{0}, size_t{1}, size_t{4}, size_t{5}}) {
      p.tensors[t].sensitivity = 1.0f + static_cast<float>(t);
      for (size_t c = 0; c < 16; ++c) p.tensors[t].step_factor[c] = c < 8 ? 0.5f : 2.0f;
    }
    p.level_scale = {0.05f, 0.2f, 0.4f};
    g.push_back({"profile_small.cgprof", "profile", p.serialize()});
    TransformEncoding e;
    e.profile = std::make_shared<const KvProfile>(p);
    e.scale = 0.1;
    e.chunk_tokens = 64;
    e.sink_tokens = 4;
    e.sink_scale = 0.5f;
    e.recompute = {1, 0, 0};
    g.push_back({"transform_prerope.cgkv", "cgkv",
                 write_cgkv_transform(test::small_shape(), kv, kT, e,
                                      std::vector<CgkvBlob>{token_ids(kT)})});
  }
  const std::vector<float> x = lcg_walk(48 * 16, 11, 16);
  g.push_back({"stream_compact_4bit.cgcs", "codec_stream", encode_values(x, 48, 16, 4, 16)});
  // Reference parameters are not on the compact grid: encode keeps them as fp32.
  g.push_back({"stream_fp32_params_3bit.cgcs", "codec_stream",
               encode(quantize_to_codes(std::span<const float>(x).first(40 * 16), 40, 16, 3, 32))});
  g.push_back({"stream_empty.cgcs", "codec_stream",
               encode(quantize_to_codes(std::span<const float>(), 0, 8, 2, 32))});
  const std::vector<float> hx = lcg_walk(4 * 24 * 8, 17, 8);
  EncodeOptions per_channel;  // layout 1
  per_channel.allow_one_model = false;
  g.push_back({"batch_shared_2bit.cgcb", "codec_batch",
               encode_values_batch(hx, 4, 24, 8, 2, 8, per_channel)});
  g.push_back(
      {"batch_one_model_2bit.cgcb", "codec_batch", encode_values_batch(hx, 4, 24, 8, 2, 8)});
  std::vector<CodeStream> mixed;
  mixed.push_back(quantize_to_codes(std::span<const float>(hx).first(24 * 8), 24, 8, 5, 8));
  mixed.push_back(
      quantize_to_codes(std::span<const float>(hx).subspan(200, 10 * 16), 10, 16, 1, 4));
  g.push_back({"batch_independent.cgcb", "codec_batch", encode_batch(mixed)});
  return g;
}

// ---- The must-reject inputs ------------------------------------------------------------

void put_le(Bytes& b, size_t at, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(const Bytes& b, size_t at, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v |= static_cast<uint64_t>(b[at + i]) << (8 * i);
  return v;
}
// Re-signs the header after an edit (a forged but self-consistent header).
void resign(Bytes& b) {
  const size_t hb = get_le(b, 8, 4);
  put_le(b, hb - 8, XXH64(b.data(), hb - 8, 0), 8);
}
// After an edit of chunk c (now `bytes` long, it ends the file or kept its size): its size and
// checksum (tag + bytes) in the table at `table`, file_bytes and the header checksum made
// consistent.
void resign_chunk(Bytes& b, size_t table, size_t c, const CgkvChunkInfo& ci, uint64_t bytes) {
  const size_t at = static_cast<size_t>(ci.range.offset);
  const size_t entry = table + 24 * c;
  put_le(b, entry + 8, bytes, 8);
  Bytes tagged(24);
  put_le(tagged, 0, c, 8);
  put_le(tagged, 8, ci.token_begin, 8);
  put_le(tagged, 16, ci.n_tokens, 8);
  tagged.insert(tagged.end(), b.begin() + static_cast<ptrdiff_t>(at),
                b.begin() + static_cast<ptrdiff_t>(at + bytes));
  // XXH3-64 from version 5, XXH64 before (FORMAT.md), computed here apart from the library's.
  const uint64_t sum = get_le(b, 4, 2) >= 5 ? XXH3_64bits(tagged.data(), tagged.size())
                                            : XXH64(tagged.data(), tagged.size(), 0);
  put_le(b, entry + 16, sum, 8);
  put_le(b, 16, b.size(), 8);  // file_bytes
  resign(b);
}
size_t chunk_table(const CgkvReader& r) {
  const CgkvInfo& in = r.info();
  return 68 + 4 * in.layers.size() + (in.has_rope ? 16 : 0) +
         (in.codec == ContainerCodec::transform ? 16 + 8 * in.layers.size() : 0);
}
size_t chunk_table(const Bytes& b) {
  return chunk_table(CgkvReader::from_bytes(b));
}

Bytes npy_with_header(const std::string& dict, size_t data_bytes) {
  std::string h = dict;
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  Bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  b.push_back(static_cast<uint8_t>(h.size()));
  b.push_back(static_cast<uint8_t>(h.size() >> 8));
  b.insert(b.end(), h.begin(), h.end());
  b.resize(b.size() + data_bytes, 0x3c);
  return b;
}

struct Reject {
  std::string file, kind;
  ErrorCode code;
  Bytes bytes;
};

std::vector<Reject> generate_reject(const std::map<std::string, Bytes>& golden) {
  std::vector<Reject> r;
  const Bytes& q = golden.at("quantized_schedule_4bit.cgkv");
  const Bytes& lv = golden.at("level_prerope_recompute.cgkv");
  auto cg = [&](const std::string& name, ErrorCode code, const Bytes& base,
                const std::function<void(Bytes&)>& edit) {
    Bytes b = base;
    edit(b);
    r.push_back({name + ".cgkv", "cgkv", code, b});
  };
  cg("truncated_preamble", ErrorCode::truncated_input, q, [](Bytes& b) { b.resize(20); });
  cg("truncated_header", ErrorCode::truncated_input, q, [](Bytes& b) { b.resize(60); });
  cg("truncated_last_chunk", ErrorCode::truncated_input, q, [](Bytes& b) { b.pop_back(); });
  cg("bad_magic", ErrorCode::corrupt_input, q, [](Bytes& b) { b[3] = 'W'; });
  cg("unsupported_version_8", ErrorCode::unsupported_version, q,
     [](Bytes& b) { put_le(b, 4, 8, 2); });
  // Codec batch layout 2 (in this file's chunks) came with version 6; version 5 has the same
  // chunk checksums.
  cg("one_model_in_version_5", ErrorCode::corrupt_input, q, [](Bytes& b) {
    put_le(b, 4, 5, 2);
    resign(b);
  });
  {
    // Transform files (codec 2): only in version >= 4; a step of 0 on a stored layer; another
    // profile's id (refused when the golden profile is set).
    const Bytes& tf = golden.at("transform_prerope.cgkv");
    const size_t block = 68 + 4 * 3 + 16;  // the transform block follows the RoPE block
    cg("transform_in_version_3", ErrorCode::corrupt_input, tf, [](Bytes& b) {
      put_le(b, 4, 3, 2);
      resign(b);
    });
    cg("transform_step_zero", ErrorCode::corrupt_input, tf, [&](Bytes& b) {
      put_le(b, block + 16 + 8 * 2, 0, 4);  // layer 2's key_step
      resign(b);
    });
    cg("transform_other_profile", ErrorCode::invalid_argument, tf, [&](Bytes& b) {
      b[block] ^= 1;  // profile_id
      resign(b);
    });
    const Bytes& pf = golden.at("profile_small.cgprof");
    const auto prof = [&](const std::string& name, ErrorCode code,
                          const std::function<void(Bytes&)>& edit) {
      Bytes b = pf;
      edit(b);
      r.push_back({name + ".cgprof", "profile", code, b});
    };
    prof("profile_checksum_wrong", ErrorCode::corrupt_input, [](Bytes& b) { b[100] ^= 1; });
    prof("profile_version_2", ErrorCode::unsupported_version, [](Bytes& b) { b[4] = 2; });
    prof("profile_truncated", ErrorCode::truncated_input, [](Bytes& b) { b.resize(40); });
    prof("profile_size_mismatch", ErrorCode::corrupt_input, [](Bytes& b) {
      b.insert(b.end() - 8, 4, 0);  // one float more than its shape holds, re-signed
      put_le(b, b.size() - 8, XXH64(b.data(), b.size() - 8, 0), 8);
    });
  }
  cg("header_checksum_wrong", ErrorCode::corrupt_input, q, [](Bytes& b) { b[40] ^= 1; });
  cg("chunk_checksum_wrong", ErrorCode::corrupt_input, q, [](Bytes& b) {
    const size_t t = chunk_table(b);
    b[get_le(b, t, 8) + 5] ^= 0x10;
  });
  cg("blob_checksum_wrong", ErrorCode::corrupt_input, lv, [](Bytes& b) { b[b.size() - 3] ^= 1; });
  {
    // verify checks every blob, not only the first of its kind.
    KVCacheConfig cfg;
    cfg.block_tokens = 64;
    const uint32_t meta = static_cast<uint32_t>(BlobKind::metadata_json);
    Bytes b = write_cgkv(test::filled_cache(40, cfg, 2).cache,
                         std::vector<CgkvBlob>{{meta, {'{', '}'}}, {meta, {'[', ']'}}});
    b.back() ^= 1;  // the second blob ends the file
    r.push_back({"second_blob_of_a_kind_checksum_wrong.cgkv", "cgkv", ErrorCode::corrupt_input, b});
  }
  cg("chunk_non_minimal_varint", ErrorCode::corrupt_input, q, [](Bytes& b) {
    // The last chunk (it ends the file) with its first tensor length as a non-minimal varint,
    // everything else made consistent: size, checksum (tag + bytes), file_bytes, header.
    const CgkvReader rd = CgkvReader::from_bytes(b);
    const size_t c = rd.info().chunks.size() - 1;
    const CgkvChunkInfo ci = rd.info().chunks[c];
    size_t last = static_cast<size_t>(ci.range.offset);
    while (b[last] & 0x80) ++last;
    b[last] |= 0x80;
    b.insert(b.begin() + static_cast<ptrdiff_t>(last) + 1, 0x00);
    resign_chunk(b, chunk_table(rd), c, ci, ci.range.bytes + 1);
  });
  const Bytes& ll = golden.at("lossless_repeated_rows.cgkv");
  // Version 3's file (its chunk checksums as version 2's): refused for the method alone.
  cg("lossless_method_2_in_version_2", ErrorCode::corrupt_input,
     load(kGolden / "v3_lossless_repeated_rows.cgkv"), [](Bytes& b) {
       put_le(b, 4, 2, 2);  // version 2 has no lossless method 2
       resign(b);
     });
  // Lossless high form 2 came with version 7; version 6 has the same chunk checksums.
  cg("lossless_high_form_2_in_version_6", ErrorCode::corrupt_input,
     golden.at("lossless_drifting_rows.cgkv"), [](Bytes& b) {
       put_le(b, 4, 6, 2);
       resign(b);
     });
  cg("lossless_rotated_row_source_ahead", ErrorCode::corrupt_input, ll, [](Bytes& b) {
    // Chunk 0's first tensor (layer 0's K): varint length, method 2, rotation 1 (adjacent
    // pairs), head_dim 8, 4 x 2 f64 angles, 10 rotated rows, a 4-byte bitmap, then the first
    // row's distance back, 10, made 0x7f: past row 0.
    const CgkvReader rd = CgkvReader::from_bytes(b);
    const CgkvChunkInfo ci = rd.info().chunks[0];
    size_t at = static_cast<size_t>(ci.range.offset);
    while (b[at] & 0x80) ++at;
    at += 1;
    if (b[at] != 2 || b[at + 1] != 1 || b[at + 2] != 8 || b[at + 67] != 10 || b[at + 72] != 10)
      throw std::runtime_error("layout moved");
    b[at + 72] = 0x7f;
    resign_chunk(b, chunk_table(rd), 0, ci, ci.range.bytes);
  });
  cg("swapped_chunk_entries", ErrorCode::corrupt_input, q, [](Bytes& b) {
    const size_t t = chunk_table(b);
    for (size_t i = 0; i < 24; ++i) std::swap(b[t + i], b[t + 24 + i]);
    resign(b);
  });
  cg("absurd_head_dim", ErrorCode::corrupt_input, q, [](Bytes& b) {
    put_le(b, 40, 0x80000000u, 4);
    resign(b);
  });
  cg("absurd_n_tokens", ErrorCode::corrupt_input, q, [](Bytes& b) {
    put_le(b, 48, uint64_t{1} << 50, 8);
    resign(b);
  });
  cg("absurd_rope_freq_scale", ErrorCode::corrupt_input, lv, [](Bytes& b) {
    const size_t rope = 68 + 4 * 3;  // small_shape has 3 layers
    const float huge = 3e38f;
    uint32_t bits;
    std::memcpy(&bits, &huge, 4);
    put_le(b, rope + 4, bits, 4);
    resign(b);
  });
  cg("overlapping_chunks", ErrorCode::corrupt_input, q, [](Bytes& b) {
    const size_t t = chunk_table(b);
    put_le(b, t + 24, get_le(b, t, 8) + 1, 8);
    resign(b);
  });
  cg("chunk_too_small_for_tokens", ErrorCode::corrupt_input, q, [](Bytes& b) {
    const size_t t = chunk_table(b);
    put_le(b, t + 8, 3, 8);
    resign(b);
  });
  const Bytes v2 = load(kGolden / "v2_quantized_schedule_4bit.cgkv");
  cg("v2_chunk_hashed_as_v1", ErrorCode::corrupt_input, v2, [](Bytes& b) {
    // A version-2 file relabelled version 1: its chunk checksums cover the tag, so they fail.
    put_le(b, 4, 1, 2);
    resign(b);
  });
  // Relabelled across the change of chunk checksum (XXH64 -> XXH3-64): the checksums fail.
  cg("v5_chunk_hashed_as_v4", ErrorCode::corrupt_input, q, [](Bytes& b) {
    put_le(b, 4, 4, 2);
    resign(b);
  });
  cg("v2_chunk_hashed_as_v5", ErrorCode::corrupt_input, v2, [](Bytes& b) {
    put_le(b, 4, 5, 2);
    resign(b);
  });

  auto npy = [&](const std::string& name, ErrorCode code, const Bytes& b) {
    r.push_back({name + ".npy", "npy", code, b});
  };
  const std::string f2 = "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }";
  npy("npy_bad_magic", ErrorCode::corrupt_input, [&] {
    Bytes b = npy_with_header(f2, 12);
    b[1] = 'X';
    return b;
  }());
  npy("npy_version_9", ErrorCode::unsupported_version, [&] {
    Bytes b = npy_with_header(f2, 12);
    b[6] = 9;
    return b;
  }());
  npy("npy_truncated_data", ErrorCode::truncated_input, npy_with_header(f2, 11));
  npy("npy_trailing_bytes", ErrorCode::corrupt_input, npy_with_header(f2, 13));
  npy("npy_fortran_order", ErrorCode::corrupt_input,
      npy_with_header("{'descr': '<f2', 'fortran_order': True, 'shape': (2, 3), }", 12));
  npy("npy_unknown_dtype", ErrorCode::corrupt_input,
      npy_with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }", 48));
  npy("npy_shape_overflow", ErrorCode::corrupt_input,
      npy_with_header(
          "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }", 0));
  npy("npy_header_truncated", ErrorCode::truncated_input, [&] {
    Bytes b = npy_with_header(f2, 0);
    b.resize(30);
    return b;
  }());

  const Bytes& s = golden.at("stream_compact_4bit.cgcs");
  const Bytes& sb = golden.at("batch_shared_2bit.cgcb");
  auto codec = [&](const std::string& name, const std::string& kind, ErrorCode code,
                   const Bytes& base, const std::function<void(Bytes&)>& edit) {
    Bytes b = base;
    edit(b);
    r.push_back({name + (kind == "codec_stream" ? ".cgcs" : ".cgcb"), kind, code, b});
  };
  codec("stream_bad_magic", "codec_stream", ErrorCode::corrupt_input, s,
        [](Bytes& b) { b[0] = 'X'; });
  codec("stream_version_2", "codec_stream", ErrorCode::unsupported_version, s,
        [](Bytes& b) { b[4] = 2; });
  codec("stream_truncated", "codec_stream", ErrorCode::truncated_input, s,
        [](Bytes& b) { b.resize(9); });
  codec("stream_trailing_byte", "codec_stream", ErrorCode::corrupt_input, s,
        [](Bytes& b) { b.push_back(0); });
  // n_rows (48 = 0x30) as the non-minimal varint 0xB0 0x00.
  codec("stream_non_minimal_varint", "codec_stream", ErrorCode::corrupt_input, s, [](Bytes& b) {
    b[5] = 0xB0;
    b.insert(b.begin() + 6, 0x00);
  });
  // n_rows as an 11-byte varint.
  codec("stream_overlong_varint", "codec_stream", ErrorCode::corrupt_input, s, [](Bytes& b) {
    b.erase(b.begin() + 5);
    b.insert(b.begin() + 5, 10, 0x80);
    b.insert(b.begin() + 15, 0x01);
  });
  codec("stream_bits_9", "codec_stream", ErrorCode::corrupt_input, s, [](Bytes& b) {
    b[8] = 9;  // magic 4, version 1, n_rows 1, dim 1, group_size 1, then bits
  });
  // The rANS payload is u32 states then 16-bit words: an odd byte count is corrupt.
  codec("stream_payload_odd_bytes", "codec_stream", ErrorCode::corrupt_input, s,
        [](Bytes& b) { b.pop_back(); });
  codec("batch_layout_3", "codec_batch", ErrorCode::corrupt_input, sb,
        [](Bytes& b) { b[6] = 3; });  // magic 4, version 1, G = 4 (1 byte), then layout
  codec("batch_version_0", "codec_batch", ErrorCode::unsupported_version, sb,
        [](Bytes& b) { b[4] = 0; });
  codec("batch_truncated", "codec_batch", ErrorCode::truncated_input, sb,
        [](Bytes& b) { b.resize(12); });
  return r;
}

// Decodes as a reader of that kind would, fully; the error code (ok when it decoded).
ErrorCode outcome(const std::string& kind, const Bytes& b, std::string* msg) {
  try {
    describe(kind, b);
    return ErrorCode::ok;
  } catch (const Error& e) {
    *msg = e.what();
    return e.code();
  }
}

void regenerate() {
  fs::create_directories(kGolden);
  fs::create_directories(kReject);
  json gm = json::object();
  std::map<std::string, Bytes> by_name;
  for (const Golden& g : generate_golden()) {
    store(kGolden / g.file, g.bytes);
    by_name[g.file] = g.bytes;
    gm[g.file] = {{"kind", g.kind}, {"expect", describe(g.kind, g.bytes)}};
  }
  // Files of older versions (vN_...) cannot be written any more; they are re-measured.
  for (const auto& e : fs::directory_iterator(kGolden)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 3 && name[0] == 'v' && name[1] >= '1' && name[1] <= '9' && name[2] == '_')
      gm[name] = {{"kind", "cgkv"}, {"expect", describe("cgkv", load(e.path()))}};
  }
  std::ofstream(kGolden / "manifest.json") << gm.dump(1) << "\n";
  json rm = json::object();
  for (const Reject& r : generate_reject(by_name)) {
    std::string msg;
    const ErrorCode got = outcome(r.kind, r.bytes, &msg);
    EXPECT_EQ(got, r.code) << r.file << ": " << msg;
    store(kReject / r.file, r.bytes);
    rm[r.file] = {{"kind", r.kind}, {"error", error_code_name(r.code)}};
  }
  std::ofstream(kReject / "manifest.json") << rm.dump(1) << "\n";
}

json load_manifest(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  if (!in) throw std::runtime_error("missing manifest in " + dir.string());
  return json::parse(in);
}

// Every file of a folder is in its manifest and the other way round.
void expect_listed(const fs::path& dir, const json& m) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == "manifest.json") continue;
    ++n;
    EXPECT_TRUE(m.contains(name)) << name << " is not in " << dir / "manifest.json";
  }
  EXPECT_EQ(n, m.size()) << "manifest lists files that are missing";
}

TEST(GoldenFiles, DecodeToTheirRecordedValues) {
  if (updating()) {
    regenerate();
    GTEST_SKIP() << "golden and must-reject files rewritten (review the diff)";
  }
  const json m = load_manifest(kGolden);
  expect_listed(kGolden, m);
  std::set<int> seen_versions;
  for (auto it = m.begin(); it != m.end(); ++it) {
    const Bytes b = load(kGolden / it.key());
    const std::string kind = it.value()["kind"];
    json got;
    try {
      got = describe(kind, b);
    } catch (const Error& e) {
      ADD_FAILURE() << it.key() << " no longer decodes: " << e.what();
      continue;
    }
    EXPECT_EQ(got, it.value()["expect"]) << it.key() << " decodes differently";
    if (kind == "cgkv") seen_versions.insert(got["version"].get<int>());
  }
  // Every version a reader accepts, each with its own chunk checksums.
  EXPECT_EQ(seen_versions, (std::set<int>{1, 2, 3, 4, 5, 6, 7}));
}

TEST(MustReject, EachFileFailsWithItsErrorCode) {
  if (updating()) GTEST_SKIP() << "regenerated by GoldenFiles";
  const json m = load_manifest(kReject);
  expect_listed(kReject, m);
  for (auto it = m.begin(); it != m.end(); ++it) {
    std::string msg;
    const ErrorCode got = outcome(it.value()["kind"], load(kReject / it.key()), &msg);
    EXPECT_EQ(error_code_name(got), it.value()["error"].get<std::string>())
        << it.key() << ": " << msg;
  }
}

}  // namespace
}  // namespace cachegen
