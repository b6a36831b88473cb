// cachegen: the llama.cpp adapter (library cachegen_llama, built with CACHEGEN_WITH_LLAMA=ON).
//
// Reads and writes the KV-cache state bytes of llama.cpp (the pinned release fetched by
// scripts/fetch-llama.sh, commit de3ff81) without going through llama.cpp, so the K and V of
// every layer can be compressed and the state rebuilt byte for byte:
//
//   sequence state  (llama_state_seq_get_data):     u32 0xaf143cd8, i32 seq_id, KV streams
//   context state   (llama_state_get_data):         u32 len + architecture name, KV streams
//   KV streams: u32 n_stream, then per stream (llama_kv_cache::state_write_meta/_data):
//     u32 cell_count; if > 0:
//     cell_count x { i32 pos, u32 n_seq_id, [i32 x, i32 y, i32 tok if cell_ext], n_seq_id x i32 }
//     u32 v_trans, u32 n_layer,
//     n_layer x { i32 k_type, u64 k_row_bytes, cell_count x k_row_bytes }
//     v_trans == 0: n_layer x { i32 v_type, u64 v_row_bytes, cell_count x v_row_bytes }
//     v_trans == 1: n_layer x { i32 v_type, u32 v_elem_bytes, u32 n_embd_v,
//                               n_embd_v x cell_count x v_elem_bytes }   (V transposed)
//   sequence state file (llama_state_seq_save_file): u32 'ggsq', u32 3, u32 n_tokens,
//                                                    n_tokens x i32, KV streams (no magic/seq_id)
//   session file        (llama_state_save_file):     u32 'ggsn', u32 10, u32 n_tokens,
//                                                    n_tokens x i32, context state
// All integers little-endian. Parsing bounds every field against the bytes left before
// allocating; malformed bytes throw cachegen::Error (truncated_input, corrupt_input or
// unsupported_version) naming the field and its offset; nothing here aborts or reads out of
// bounds. Not covered: models whose KV layers lack V (MLA) or that keep two caches (iSWA,
// hybrid/recurrent memory); their state bytes are rejected as corrupt (trailing bytes) or
// unsupported, never misread silently.
//
// Thread safety: the parse/build functions are re-entrant. A Model may be shared by several
// Contexts; one Context must be used by one thread at a time (llama.cpp's rule).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cachegen/container.h"
#include "cachegen/half.h"
#include "cachegen/kv_cache.h"
#include "cachegen/profile.h"
#include "cachegen/quality_levels.h"
#include "cachegen/transform.h"

struct llama_model;
struct llama_context;

namespace cachegen::llama {

namespace detail {
class Layer0Projector;
}

// ggml type ids as they appear in state bytes (ggml.h `enum ggml_type`, frozen by GGUF).
inline constexpr int32_t kTypeF32 = 0;
inline constexpr int32_t kTypeF16 = 1;
inline constexpr int32_t kTypeQ4_0 = 2;
inline constexpr int32_t kTypeQ8_0 = 8;
inline constexpr int32_t kTypeBF16 = 30;

// What a snapshot's K/V were computed by. Two snapshots are interchangeable only when equal.
struct ModelIdentity {
  std::string architecture;       // GGUF general.architecture, e.g. "llama"
  uint32_t n_layer = 0;           // transformer blocks
  uint32_t n_head_kv = 0;         // KV heads per layer
  uint32_t head_dim = 0;          // channels per KV head
  uint64_t gguf_header_hash = 0;  // XXH3-64 of the GGUF file bytes before the tensor data
                                  // (header, metadata, tensor infos)
  bool operator==(const ModelIdentity&) const = default;
};

// One KV cell (one cached token position) as serialised.
struct KvCell {
  int32_t pos = 0;
  std::vector<int32_t> seq_ids;          // exactly one in a sequence state
  std::array<int32_t, 3> ext{0, 0, -1};  // llama_kv_cell_ext {x, y, tok}; only if cell_ext
};

// One layer's K and V, token-major whatever the serialised layout: k is [n_cells, k_row_bytes],
// v is [n_cells, v_row_bytes]. A row holds n_embd = n_head_kv * head_dim elements of its ggml
// type, heads outermost, i.e. fp16 rows are [n_kv_heads, head_dim].
struct KvLayer {
  int32_t k_type = kTypeF16;
  uint64_t k_row_bytes = 0;
  std::vector<uint8_t> k;
  int32_t v_type = kTypeF16;
  uint64_t v_row_bytes = 0;   // when transposed: v_elem_bytes * n_embd_v (recomputed on build)
  uint32_t v_elem_bytes = 0;  // transposed layout only: ggml_type_size(v_type) as written
  uint32_t n_embd_v = 0;      // transposed layout only: elements per V row as written
  std::vector<uint8_t> v;
};

// One KV stream (llama.cpp keeps one per sequence unless the cache is unified).
struct KvStream {
  std::vector<KvCell> cells;  // empty: the stream holds no cells, nothing else is written
  bool v_trans = false;       // V serialised transposed (flash attention off)
  std::vector<KvLayer> layers;
};

enum class StateKind : uint8_t {
  sequence = 0,  // llama_state_seq_get_data / llama_state_seq_save_file
  context = 1,   // llama_state_get_data / llama_state_save_file (session)
};

// A parsed llama.cpp state: everything needed to rebuild the exact bytes.
struct KvSnapshot {
  ModelIdentity model;          // set by capture_seq_state; empty when parsed from bytes alone
  std::vector<int32_t> tokens;  // token ids of the cached positions (state files, captures)
  StateKind kind = StateKind::sequence;
  int32_t seq_id = 0;     // sequence state only: the source sequence id in the header
  std::string arch_tag;   // context state only: the architecture name llama.cpp writes first
  bool cell_ext = false;  // cells carry llama_kv_cell_ext (M-RoPE and PLE models)
  std::vector<KvStream> streams;

  // The one stream holding cells (throws invalid_argument when none or several do).
  const KvStream& data_stream() const;
  KvStream& data_stream();
  size_t n_cells() const { return data_stream().cells.size(); }
};

struct ParseOptions {
  bool cell_ext = false;  // the model uses M-RoPE or per-layer-embedding n-grams (see Model)
  size_t max_streams = 256;
  size_t max_layers = 4096;
  size_t max_cells = size_t{1} << 24;
  size_t max_seq_ids_per_cell = 256;
  size_t max_tokens = size_t{1} << 24;
};

// Parses state bytes of the given kind. Every byte must be consumed (corrupt_input otherwise).
KvSnapshot parse_seq_state(std::span<const uint8_t> bytes, const ParseOptions& options = {});
KvSnapshot parse_context_state(std::span<const uint8_t> bytes, const ParseOptions& options = {});
// Rebuilds the in-memory state bytes of snapshot.kind (what llama_state_seq_set_data /
// llama_state_set_data read). For a parsed snapshot whose K/V were not changed the result
// equals the parsed bytes. Throws invalid_argument when sizes are inconsistent
// (e.g. k.size() != n_cells * k_row_bytes).
std::vector<uint8_t> build_state(const KvSnapshot& snapshot);

// State files: the kind is taken from the magic; unknown magic → corrupt_input, known magic
// with another version → unsupported_version. build_state_file writes snapshot.tokens.
KvSnapshot parse_state_file(std::span<const uint8_t> bytes, const ParseOptions& options = {});
std::vector<uint8_t> build_state_file(const KvSnapshot& snapshot);

// ---- Element access ---------------------------------------------------------------------

// Elements per row of a layer (n_kv_heads * head_dim).
size_t k_row_elements(const KvLayer& layer);
size_t v_row_elements(const KvLayer& layer);
// K or V of a layer as fp32 [n_cells, n_embd], through ggml's own to_float for any ggml type.
std::vector<float> layer_k_float(const KvLayer& layer);
std::vector<float> layer_v_float(const KvLayer& layer);
// Replaces K or V from fp32 [n_cells, n_embd], converted to the layer's type (f32, f16, bf16:
// round to nearest; quantized types through ggml_quantize_chunk). Sizes must match.
void set_layer_k_float(KvLayer& layer, std::span<const float> values);
void set_layer_v_float(KvLayer& layer, std::span<const float> values);

// ---- Running a model ------------------------------------------------------------------------

struct ContextSettings {
  uint32_t n_ctx = 2048;
  bool flash_attn = false;  // on: V row-major in state bytes; off: V transposed
  int32_t type_k = kTypeF16;
  int32_t type_v = kTypeF16;
  int32_t n_threads = 2;
  bool operator==(const ContextSettings&) const = default;
};

// A loaded GGUF model (CPU only). Loading silences llama.cpp's log unless
// $CACHEGEN_LLAMA_LOG is set. Throws not_found / corrupt_input.
class Model {
 public:
  explicit Model(const std::string& gguf_path);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  llama_model* get() const { return model_; }
  const ModelIdentity& identity() const { return identity_; }
  bool cell_ext() const { return cell_ext_; }
  int32_t n_vocab() const;
  int32_t n_ctx_train() const;  // the context length the model was trained for
  // Tokenizes text (with BOS when the model adds one).
  std::vector<int32_t> tokenize(const std::string& text, bool add_bos) const;
  // Text of token ids (special tokens left out).
  std::string detokenize(std::span<const int32_t> tokens) const;
  const std::string& path() const { return path_; }
  // Layer 0's K/V computed from this model's weights (restores of files whose layer 0 is not
  // stored); built on first use, then shared. Throws invalid_argument when the architecture's
  // layer 0 is not supported (detail::Layer0Projector::supported).
  const detail::Layer0Projector& layer0() const;

 private:
  llama_model* model_ = nullptr;
  std::string path_;
  ModelIdentity identity_;
  bool cell_ext_ = false;
  mutable std::once_flag layer0_once_;
  mutable std::unique_ptr<detail::Layer0Projector> layer0_;
};

// How many times cachegen has run a llama.cpp forward pass (llama_decode, through
// Context::decode) in this process. Restoring a file never adds to it (tests check this).
uint64_t model_evaluations();

// A llama.cpp context with known settings. Throws invalid_argument when llama.cpp refuses
// the settings (e.g. a quantized KV type whose block does not divide head_dim).
class Context {
 public:
  Context(const Model& model, const ContextSettings& settings);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  llama_context* get() const { return ctx_; }
  const Model& model() const { return model_; }
  const ContextSettings& settings() const { return settings_; }
  // Empties the KV cache.
  void clear();
  // Decodes tokens into sequence 0 at positions first_pos.. and returns the logits of every
  // token when all_logits (else of the last only), [n, n_vocab] row-major.
  std::vector<float> decode(std::span<const int32_t> tokens, int32_t first_pos, bool all_logits);

 private:
  const Model& model_;
  ContextSettings settings_;
  llama_context* ctx_ = nullptr;
};

// Reads sequence seq_id's state and parses it; tokens are recorded as given (the caller's
// record of what was decoded; their count must equal the number of cells).
KvSnapshot capture_seq_state(Context& ctx, std::span<const int32_t> tokens, int32_t seq_id = 0);
// Rebuilds the state bytes and loads them into sequence seq_id of ctx (whose cache should be
// empty). Refuses, with invalid_argument naming the difference, a snapshot from another model
// (identity), with another V layout (flash attention), other K/V types, or more cells than
// n_ctx. Throws corrupt_input if llama.cpp still rejects the bytes.
void restore_seq_state(Context& ctx, const KvSnapshot& snapshot, int32_t seq_id = 0);
// The same on a llama_context made elsewhere (the C API) from a model with `model`'s weights:
// the snapshot records model.identity(). The restore checks the identity, the state kind and
// n_ctx; llama.cpp itself refuses another V layout or other K/V types (corrupt_input then).
KvSnapshot capture_seq_state(llama_context* ctx, const Model& model,
                             std::span<const int32_t> tokens, int32_t seq_id = 0);
void restore_seq_state(llama_context* ctx, const Model& model, const KvSnapshot& snapshot,
                       int32_t seq_id = 0);

// ---- Snapshots in the .cgkv container (src/llama/cgkv_bridge.cpp) -----------------------
//
// A snapshot becomes one .cgkv file: the K/V of its data stream (the one stream holding cells)
// in the container's chunks, the token ids in a token_ids blob, the model identity in a
// metadata_json blob, and everything else build_state needs (state kind, seq_id, arch tag,
// cells, per-layer types and row sizes, V layout) in an app_state blob. The blob layouts are
// in docs/FORMAT.md, "llama.cpp state blobs". Container shape: n_layers = the state's layers,
// n_kv_heads x head_dim from the identity when they multiply to the row width, else 1 x row
// width (state files packed without a model). K and V rows must have equal widths in every
// layer.

// How the K/V of a snapshot are stored: the settings a quality level (cachegen/quality_levels.h)
// or explicit bits resolve to.
struct SnapshotEncoding {
  // true: write_cgkv_lossless (exact fp16, lossless method 2); K and V must be f16 in every layer
  // (other types are refused with invalid_argument: use a quantized level). Rebuilt state bytes
  // are identical to the original.
  bool lossless = false;
  KVCacheConfig quantized;  // used when !lossless: bits, group size, block (= chunk) tokens
  int zstd_level = 0;       // lossless only: > 0 also tries zstd at that zstd level (slow)
  // 0: default_chunk_tokens(true, the snapshot's token bytes) (long chunks find more repeated
  // rows; wide models' are shortened so that a reader's chunk stays within 32 MiB).
  size_t lossless_chunk_tokens = 0;

  // Uniform `bits` for every layer, K and V (layer_groups = 1).
  static SnapshotEncoding bits(int bits, size_t group_size = 32);
  static SnapshotEncoding exact();
  // A quality level (docs/QUALITY_LEVELS.md): lossless = exact(); the others
  // quality_level_config(level, shape, rope): keys pre-RoPE, layer 0 recomputed from the token
  // ids (restoring then needs the model), groups of 256, per-layer K/V bits.
  static SnapshotEncoding quality(QualityLevel level, const ModelShape& shape,
                                  const RopeParams& rope);
  // The same for `model` (shape and RoPE from it); where Model::layer0 cannot compute the
  // model's layer 0 from its weights, layer 0 is stored instead (with the bits of layer 1).
  static SnapshotEncoding quality(QualityLevel level, const Model& model);

  // Set: a transform file (container codec 2) coded with a calibration profile at the rate its
  // fields give (TransformEncoding), instead of `quantized`. Keys go pre-RoPE as the profile
  // says (from the first cell's position: cells must be one run of positions).
  std::optional<TransformEncoding> transform;
  // `profile` (whose fingerprint must be the model's) with layer 0 recomputed where `quality`
  // would recompute it, 256-token chunks; the caller sets the rate (scale, bits_per_element
  // or max_kl of `transform`).
  static SnapshotEncoding profiled(std::shared_ptr<const KvProfile> profile, const Model& model);
  // profiled() at the scale the profile calibrated for a lossy level (invalid_argument when the
  // profile has none for it).
  static SnapshotEncoding profiled(std::shared_ptr<const KvProfile> profile, const Model& model,
                                   QualityLevel level);
};

// The model's RoPE as llama.cpp applies it to keys: {arch}.rope.freq_base,
// {arch}.rope.dimension_count, the rope type (NEOX or not), the trained frequency scale.
RopeParams model_rope_params(const Model& model);
// The container shape the bridge uses for a model (every layer attention, its KV heads and
// head_dim): what SnapshotEncoding::quality needs.
ModelShape model_cache_shape(const Model& model);

// Serialises a snapshot with `identity` recorded as the model (pass snapshot.model for
// captures; a partial identity for state files packed without a model). Throws
// invalid_argument for an empty state, several streams with cells, unequal K/V widths, a
// lossless level on non-f16 K/V, or an invalid KVCacheConfig. A config with keys pre-RoPE
// gets rope_position_offset = the first cell's position; where pre-RoPE cannot be honoured
// (cells not one run of consecutive positions, or no identity splitting rows into heads) keys
// are stored as given. Recomputed layers (bits 0) need one token id per cell; without them the
// layer is stored with the next stored layer's bits.
std::vector<uint8_t> snapshot_to_cgkv(const KvSnapshot& snapshot, const ModelIdentity& identity,
                                      const SnapshotEncoding& encoding);
// The same at SnapshotEncoding::quality(level, model) for a capture of `model`.
std::vector<uint8_t> snapshot_to_cgkv(const KvSnapshot& snapshot, const Model& model,
                                      QualityLevel level);

// Rebuilds a snapshot from a file written by snapshot_to_cgkv: K/V decoded and converted back
// to each layer's stored type (f16 from a lossless file: the exact bits), model identity from
// the metadata blob (empty when absent, so restore_seq_state refuses it), tokens from the
// token_ids blob. Every blob is treated as hostile: a missing or malformed app_state, malformed
// metadata JSON, or fields inconsistent with the container header throw corrupt_input /
// truncated_input / unsupported_version naming the blob and field. `limits` bounds counts.
// A file with recomputed layers (CgkvInfo::recomputed_layers) is refused with invalid_argument:
// use the overload taking the model.
KvSnapshot cgkv_to_snapshot(const CgkvReader& reader, const ParseOptions& limits = {});
// The same, rebuilding a recomputed layer 0 from the token ids with `model` (which must be the
// file's model: identity compared, invalid_argument otherwise): K and V computed from the
// model's layer-0 weights (embedding, attention norm, K/V projections; Model::layer0), K rotated
// to each cell's position. No forward pass is run: the cost is proportional to the distinct
// tokens times n_embd times the K/V width. Needs one token id per cell and only layer 0 marked
// recomputed (corrupt_input otherwise).
KvSnapshot cgkv_to_snapshot(const CgkvReader& reader, const Model& model,
                            const ParseOptions& limits = {});

// ---- Packing state files (`cachegen llama pack` / `unpack`, the C API, Python) -------------
// One home for the choice of level, so every front end writes the same bytes.

// The level options of `cachegen llama pack` (same names, same defaults).
struct PackOptions {
  std::string level = "high";  // lossless | high | medium | low (unless bits or lossless)
  bool lossless = false;       // the exact f16 K/V (same as level "lossless")
  std::optional<int> bits;     // uniform bits for K and V (1..8) instead of a level
  size_t group_size = 32;      // tokens per quantization group (with bits)
  size_t chunk_tokens = 0;     // tokens per container chunk; 0: the level's default
  // A calibration profile of the model (needs the model): a transform file (codec 2) at the
  // level's calibrated scale, or at bits_per_element / max_kl when one is > 0.
  std::shared_ptr<const KvProfile> profile;
  double bits_per_element = 0, max_kl = 0;
};

// The level chosen by options. `model` (may be null) gives the shape and RoPE of the quality
// levels; without it they are stored without pre-RoPE keys and without recomputed layers (both
// need the model). With a model whose layer 0 restore cannot compute from the weights, layer 0
// is stored.
SnapshotEncoding pack_encoding(const PackOptions& options, const Model* model, size_t n_layers);
// A llama.cpp state file (llama_state_seq_save_file / llama_state_save_file bytes) as a .cgkv
// at pack_encoding; `model` (may be null) is recorded as the identity (else the state's
// architecture tag and layer count). The parsed snapshot comes back too.
struct PackedState {
  KvSnapshot snapshot;
  std::vector<uint8_t> cgkv;
};
PackedState pack_state_file(std::span<const uint8_t> state, const Model* model,
                            const PackOptions& options);
// The snapshot of a .cgkv written by pack_state_file (or a capture): cgkv_to_snapshot with the
// model when given (needed when the file recomputes layers), without it otherwise.
// build_state_file of it gives the state file back (the exact bytes at a lossless level).
KvSnapshot unpack_snapshot(const CgkvReader& reader, const Model* model);

// The model identity recorded in a file's metadata blob (std::nullopt when there is none).
std::optional<ModelIdentity> cgkv_model_identity(const CgkvReader& reader);

// ---- Calibration (`cachegen calibrate`) ------------------------------------------------

struct CalibrateOptions {
  std::string model_path;
  std::string text_path;
  // Windows of prefix + n_continue + 1 tokens taken from the END of the text (eval scores the
  // first windows, so the two do not overlap on a long enough text).
  int n_windows = 8;
  int prefix = 448;
  int n_continue = 64;
  std::string block = "layer";  // "layer": PCA over a layer's whole K (or V) row; "head": per head
  // "pca", or a fixed rotation for comparison: "hadamard" (random signs), "identity".
  std::string rotation = "pca";
  // Relative mean squared error (of the tensor's variance) of the noise that probes each
  // tensor's sensitivity: small enough for KL to be linear in it, large enough to measure.
  double probe_noise = 0.01;
  // Bands of components (in variance order) whose sensitivities are measured apart: each
  // component's step follows its band's (1 = one sensitivity per tensor).
  int bands = 8;
  bool levels = true;  // also choose the lossy quality levels' scales (KL matched to the levels')
  uint32_t sink_tokens = 0;  // recorded as the profile's default sinks
  float sink_scale = 1;
  bool flash_attn = false;
  int32_t n_threads = 2;
};

// Measures a profile on real KV captured through llama.cpp (docs/QUALITY_LEVELS.md,
// "Calibrated transform"): per layer and K/V the mean and PCA basis of the rows (keys with RoPE
// undone), the KL per unit of mean squared error of noise injected into that tensor alone, and,
// with options.levels, each lossy level's scale: the largest scale whose transform files reach
// at most the KL the level's own files reach on the same windows. `progress` gets a line per
// step.
KvProfile calibrate_profile(const CalibrateOptions& options,
                            const std::function<void(const std::string&)>& progress);

// ---- Quality evaluation (`cachegen eval`) -----------------------------------------------

struct EvalOptions {
  std::string model_path;
  std::string text_path;
  int n_contexts = 8;   // windows of the text, each prefix + n_continue + 1 tokens
  int prefix = 448;     // tokens whose KV is captured and compressed
  int n_continue = 64;  // next-token predictions scored per window
  size_t group_size = 32;
  bool flash_attn = false;
  int32_t n_threads = 2;
  // "" : the default table. "rate": the rate–quality sweep instead (our ladder of uniform bits
  // 1..8 with layer 0 recomputed and keys pre-RoPE, the quality levels, KIVI at 2/3/4 bits
  // (groups of 32, a 32-token fp16 window) and 2/4 bits (groups of 128, no window),
  // TurboQuant-style at 2..4 bits, llama.cpp q8_0/q4_0). Anything else: invalid_argument.
  std::string sweep;
  // A calibration profile of the model: adds our transform rows (the levels it calibrated,
  // "profile-<level>", and with sweep "rate" a ladder of bits-per-element targets,
  // "profile-<bits>b"), priced through the real file path.
  std::string profile_path;
};

// One row of the rate–quality table. KL is mean KL(exact || method) in nats over all scored
// predictions; ppl over the same predictions' targets.
struct EvalRow {
  std::string method;
  // "exact", "reference", "ours", "kivi", "turboquant" or "llama.cpp".
  std::string family;
  // How bits_per_element was counted: "file" (the whole .cgkv snapshot_to_cgkv writes for the
  // method: header, chunks, token ids and state blobs), "codes" (the codec's coded bytes only:
  // settings the container cannot express), "layout" (an exact count of a baseline's
  // fixed-width layout, scales, zeros, norms and fp16 window included), "ggml" (llama.cpp's
  // block size), "fp16".
  std::string priced;
  bool emulated = false;          // llama.cpp KV type emulated on the captured rows
  double bits_per_element = 0;    // bits * 8 / K+V elements of the prefix (see priced)
  double k_bits = 0, v_bits = 0;  // the same for K and V alone (NaN for "file": one file)
  double estimate_bits = 0;       // reference's entropy estimate (reference rows), else 0
  double ratio_vs_fp16 = 0;
  double kl = 0, top1 = 0, ppl = 0, ppl_exact = 0;
  double encode_ms = 0, decode_ms = 0;  // total over windows
};

// Runs the evaluation; `progress` (may be empty) gets one line per finished step.
std::vector<EvalRow> evaluate_kv_quality(const EvalOptions& options,
                                         const std::function<void(const std::string&)>& progress);

// The rate–quality plot of eval rows as a standalone SVG document: bits/element on x, KL on a
// log10 y axis, one series per family except "exact" and "reference" (our "level-*" rows in a
// series "ours levels" of their own; rows with KL 0 cannot sit on a log axis and are left out),
// a legend, `title` on top.
std::string eval_rows_svg(const std::vector<EvalRow>& rows, const std::string& title);

}  // namespace cachegen::llama
