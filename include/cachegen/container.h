// cachegen: the .cgkv container, a whole model's compressed KV cache in one checksummed,
// chunked file (byte layout: docs/FORMAT.md, "Container").
//
// Readers treat every byte as hostile: every error is a cachegen::Error naming the field,
// chunk or offset (corrupt_input, truncated_input, unsupported_version); header fields are
// bounded before anything is allocated; checksums are verified before data is interpreted.
// Thread safety: a CgkvReader is immutable after opening; any number of threads may call its
// const functions at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cachegen/half.h"
#include "cachegen/kv_cache.h"

namespace cachegen {

enum class ContainerCodec : uint8_t {
  quantized = 0,      // rANS code streams of the quantized codes (lossy)
  lossless_fp16 = 1,  // the exact fp16 values (FORMAT.md, "Chunk payload", codec 1)
  transform = 2,      // coefficients of a calibration profile's transform (lossy; codec 2)
};

struct KvProfile;  // cachegen/profile.h

// Blob kinds (frozen); readers ignore kinds they do not know.
enum class BlobKind : uint32_t { token_ids = 1, metadata_json = 2, app_state = 3 };

struct CgkvBlob {
  uint32_t kind = 0;
  std::vector<uint8_t> bytes;
};

// The token_ids blob of `tokens` (i32 little-endian each), and its ids back: corrupt_input
// when the size is not a multiple of 4 or the ids are more than max_tokens.
CgkvBlob token_ids_blob(std::span<const int32_t> tokens);
std::vector<int32_t> decode_token_ids(std::span<const uint8_t> bytes, size_t max_tokens = SIZE_MAX);

// How a layer's keys are stored (the layer entry's transform byte).
enum class KeyTransform : uint8_t {
  none = 0,
  pre_rope = 1,  // RoPE undone before quantization (CgkvInfo::rope); read_tokens re-applies it
};

struct CgkvLayerInfo {
  int key_bits = 0, value_bits = 0;  // 0 for non-attention, recomputed and lossless layers
  bool attention = false;
  // Not stored: the chunks hold nothing for it, read_tokens returns zeros for it, and a
  // consumer must rebuild its K/V from the token ids with the model (llama::cgkv_to_snapshot).
  bool recomputed = false;
  KeyTransform key_transform = KeyTransform::none;
  // Transform files (codec 2): the quantization step of the layer's K and V coefficients
  // (> 0 for stored attention layers, 0 otherwise).
  float key_step = 0, value_step = 0;
};

struct CgkvRange {
  uint64_t offset = 0, bytes = 0, xxh64 = 0;
};

struct CgkvChunkInfo {
  CgkvRange range;
  size_t token_begin = 0, n_tokens = 0;
};

struct CgkvBlobInfo {
  uint32_t kind = 0;
  CgkvRange range;
};

struct CgkvInfo {
  uint16_t version = 0;
  uint64_t file_bytes = 0, header_bytes = 0;
  int n_layers = 0, n_kv_heads = 0, head_dim = 0;
  size_t group_size = 0, n_tokens = 0, chunk_tokens = 0;
  ContainerCodec codec = ContainerCodec::quantized;
  ParamMode param_mode = ParamMode::compact;
  std::vector<CgkvLayerInfo> layers;
  std::vector<CgkvChunkInfo> chunks;
  std::vector<CgkvBlobInfo> blobs;
  // Present when some layer's keys are pre-RoPE: token i has position rope_position_offset + i.
  bool has_rope = false;
  RopeParams rope;
  int32_t rope_position_offset = 0;
  // Transform files (codec 2): the profile they were written with (KvProfile::id), and the
  // first sink_tokens tokens coded at sink_scale times each step.
  uint64_t profile_id = 0;
  uint32_t sink_tokens = 0;
  float sink_scale = 1;

  int n_attention_layers() const;
  // Model layers (indices into `layers`) that must be recomputed from the token ids.
  std::vector<int> recomputed_layers() const;
  // Elements of K and V over all attention layers and tokens.
  size_t n_elements() const;
};

// Serialises a cache (every token: sealed blocks as they are, the tail coded now). The chunk
// size is the cache's block_tokens. Blobs (token ids, metadata...) are stored alongside.
// Recomputed layers are flagged and store nothing; with config.key_pre_rope every stored
// layer's keys are written pre-RoPE and the RoPE parameters go into the header.
std::vector<uint8_t> write_cgkv(const KVCache& cache, std::span<const CgkvBlob> blobs = {});

// Where a writer streams a file it never holds whole (e.g. an OutputFile's write_at, a
// socket's buffer): called with the chunks and blobs in file order, at increasing offsets after
// the header's place, and last with the header at offset 0; the file is complete after that
// call. An exception it throws ends the write and reaches the writer's caller.
using CgkvWriteAt = std::function<void(uint64_t offset, std::span<const uint8_t> bytes)>;
// write_cgkv's file written to `out` as it is framed, from the cache's blocks through a 1 MiB
// buffer: the same bytes, without a second copy of them in memory. Returns the file's size.
// Argument errors are thrown before out's first call.
uint64_t write_cgkv(const CgkvWriteAt& out, const KVCache& cache,
                    std::span<const CgkvBlob> blobs = {});

// A lossless file: kv holds fp16 [n_attention_layers, 2, n_tokens, n_kv_heads, head_dim]
// (token-major, K then V). Each tensor of a chunk is stored with lossless method 2 (repeated
// and RoPE-rotated rows by reference, anchored rANS high bytes, raw or rANS low bytes;
// docs/FORMAT.md); zstd_level > 0 also tries
// byte planes + zstd at that level per tensor and keeps the smaller (much slower to write).
std::vector<uint8_t> write_cgkv_lossless(const ModelShape& shape, std::span<const Half> kv,
                                         size_t n_tokens, size_t chunk_tokens,
                                         std::span<const CgkvBlob> blobs = {}, int zstd_level = 0);
// The same file written to `out` wave by wave (a few tensors per thread at a time): the working
// set is a wave's packed tensors, not the file. Returns the file's size; argument errors are
// thrown before out's first call.
uint64_t write_cgkv_lossless(const CgkvWriteAt& out, const ModelShape& shape,
                             std::span<const Half> kv, size_t n_tokens, size_t chunk_tokens,
                             std::span<const CgkvBlob> blobs = {}, int zstd_level = 0);

// A transform-coded file (codec 2, docs/FORMAT.md): each stored tensor's rows projected on the
// profile's basis, quantized with one step per component (the tensor's step times the
// profile's step factor) and entropy-coded with a table per component or per class of
// components, whichever is smaller.
struct TransformEncoding {
  std::shared_ptr<const KvProfile> profile;  // required; its shape must match the model's
  // The rate: exactly one of a step scale (KvProfile::steps), a size target in bits per K/V
  // element of the whole file (the smallest scale that fits, by bisection), or a target
  // mean KL estimated from the profile's sensitivities (sum over components of sensitivity
  // times squared error per element; the largest scale that meets it).
  double scale = 0, bits_per_element = 0, max_kl = 0;
  size_t chunk_tokens = 256;  // 1..2^18
  // Per model layer: store nothing, recompute from the token ids (FORMAT.md layer rules).
  std::vector<uint8_t> recompute;
  int32_t rope_position_offset = 0;  // position of token 0 (keys pre-RoPE per the profile)
  // -1: the profile's sink_tokens / sink_scale; else these.
  int64_t sink_tokens = -1;
  float sink_scale = 1;
};
// kv: fp32 [n_attention_layers, 2, n_tokens, n_kv_heads, head_dim], keys as the model holds
// them (RoPE applied); recomputed layers' values are ignored. invalid_argument when the profile
// does not fit the shape or the target cannot be met (e.g. bits_per_element below what the
// coarsest step reaches). `scale_used`, when set, receives the scale chosen.
std::vector<uint8_t> write_cgkv_transform(const ModelShape& shape, std::span<const float> kv,
                                          size_t n_tokens, const TransformEncoding& encoding,
                                          std::span<const CgkvBlob> blobs = {},
                                          double* scale_used = nullptr);

class CgkvReader {
 public:
  // Parses and checks the header of an in-memory file (the bytes are kept).
  static CgkvReader from_bytes(std::vector<uint8_t> bytes);
  // Opens a file: reads and checks only its header; chunks are read on demand.
  static CgkvReader open_file(const std::string& path);
  // Maps a file read-only and checks its header: chunks are verified and decoded where they lie
  // in the OS's page cache (open_file reads each into fresh memory first). A file truncated by
  // another process while mapped raises SIGBUS when a lost page is read: for applications that
  // turn that into an error (exit_on_truncated_input, cachegen/npy.h), as the CLI does.
  static CgkvReader map_file(const std::string& path);

  const CgkvInfo& info() const noexcept { return info_; }

  // Largest number of fp16 values one read may produce (default 2^30, 2 GiB): the header's token
  // count and shape are checked against it before anything is allocated, so a tiny forged file
  // cannot ask for a huge buffer. A read over the limit throws Error(invalid_argument).
  void set_max_elements(size_t n) noexcept { max_elements_ = n; }
  // The profile a transform file (codec 2) decodes with: invalid_argument unless its id and
  // shape are the file's. Reading such a file without one throws invalid_argument naming the
  // profile id it needs. Other files ignore it.
  void set_profile(std::shared_ptr<const KvProfile> profile);
  const std::shared_ptr<const KvProfile>& profile() const noexcept { return profile_; }

  // fp16 [n_attention_layers, 2, end - begin, n_kv_heads, head_dim] for tokens [begin, end)
  // (token-major, K then V). Reads and verifies only the chunks that overlap the range.
  // Pre-RoPE keys come back rotated (as the model holds them); recomputed layers are zeros
  // (info().recomputed_layers() names them).
  std::vector<Half> read_tokens(size_t begin, size_t end) const;
  // The same into a caller's buffer of exactly read_elements(begin, end) values (else
  // invalid_argument): no allocation of the output.
  void read_tokens_into(size_t begin, size_t end, std::span<Half> out) const;
  // Values a read of tokens [begin, end) produces; invalid_argument for a range outside the file.
  size_t read_elements(size_t begin, size_t end) const;
  // The bytes of the first blob of a kind (checksum verified), or nullopt.
  std::optional<std::vector<uint8_t>> read_blob(uint32_t kind) const;
  // The bytes of blob `index` (info().blobs order; checksum verified). invalid_argument when
  // there is no such blob.
  std::vector<uint8_t> read_blob_at(size_t index) const;
  // Verifies every chunk and blob checksum (every blob, whatever its kind) and decodes every
  // chunk; throws on the first problem, naming it.
  void verify() const;
  // The raw chunk bytes (checksum verified).
  std::vector<uint8_t> read_chunk(size_t index) const;
  // Bytes of each tensor in chunk `index`, [n_attention_layers * 2] (K then V per attention
  // layer; 0 for recomputed layers), from the chunk's framing: checksum and framing are
  // checked as read_tokens checks them, the tensors are not decoded.
  std::vector<uint64_t> chunk_tensor_bytes(size_t index) const;

  struct Source;  // where the bytes come from (memory or file)

 private:
  explicit CgkvReader(std::shared_ptr<const Source> src);
  // Chunk `index`'s bytes, checksum verified: in place for sources in memory, else read into
  // `hold` (never filled before the read).
  std::span<const uint8_t> chunk_bytes(size_t index, std::unique_ptr<uint8_t[]>& hold) const;
  std::shared_ptr<const Source> src_;
  CgkvInfo info_;
  size_t max_elements_ = size_t{1} << 30;
  std::shared_ptr<const KvProfile> profile_;
  void need_profile() const;
};

// What `cachegen inspect --json` prints for a file, as JSON text: sizes, shape, codec, RoPE,
// bits per element, and per layer its bits and K/V bytes. Reads every chunk's framing and every
// blob (checksums checked; nothing is decoded: verify() decodes); throws as those reads do.
std::string cgkv_inspect_json(const CgkvReader& reader, int indent = 2);

}  // namespace cachegen
