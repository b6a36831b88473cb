/* cachegen: the C API, for other languages (C99; ABI-stable: handles are opaque, option structs
 * carry their own size so they can grow, and enum values are frozen).
 *
 * Conventions, for every function below unless it says otherwise:
 *   - Status: an int, CACHEGEN_OK (0) or one of the codes below (equal to cachegen::ErrorCode).
 *     No exception, abort or longjmp crosses the boundary; hostile input gives a status.
 *   - cachegen_last_error() gives the message of the calling thread's most recent call that
 *     returns a status: the failure's message (naming the field, key or limit), or "" after a
 *     success.
 *   - Handles: *_open / *_create give a handle the caller owns and releases with the matching
 *     *_free, which accepts NULL. On failure the out-handle is set to NULL.
 *   - Buffers the library allocates (out-pointers of type uint8_t** or char**) are released with
 *     cachegen_free(); on failure they are set to NULL. Buffers the caller passes in are only
 *     read (or written, for outputs with an explicit length) during the call; the library keeps
 *     no pointer to them.
 *   - Pointer arguments must not be NULL unless documented; a NULL one is CACHEGEN_INVALID_ARGUMENT
 *     (a zero-length buffer may be NULL).
 *   - Thread safety: functions without state (quantize, encode, status names) may be called from
 *     any number of threads. A handle may be used from several threads at once where its section
 *     says so; cachegen_last_error() is per thread. */
#ifndef CACHEGEN_C_H
#define CACHEGEN_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  CACHEGEN_OK = 0,
  CACHEGEN_INVALID_ARGUMENT = 1,
  CACHEGEN_CORRUPT_INPUT = 2,
  CACHEGEN_TRUNCATED_INPUT = 3,
  CACHEGEN_OUTPUT_TOO_SMALL = 4,
  CACHEGEN_UNSUPPORTED_VERSION = 5,
  CACHEGEN_IO_ERROR = 6,
  CACHEGEN_OUT_OF_MEMORY = 7,
  CACHEGEN_NOT_FOUND = 8,
  CACHEGEN_UNAVAILABLE = 9
};

/* Stable name of a status code ("corrupt_input"); never NULL. */
const char* cachegen_status_name(int status);
/* Message of the calling thread's most recent call ("" if it succeeded); valid until the next
 * call. */
const char* cachegen_last_error(void);
/* "MAJOR.MINOR.PATCH" */
const char* cachegen_version(void);

/* A quantized [n_rows, dim] block (cachegen::CodeStream). */
typedef struct cachegen_code_stream cachegen_code_stream;

/* Quantize x[n_rows * dim] (fp32, or fp16 bit patterns) into *out (caller frees). */
int cachegen_quantize_f32(const float* x, size_t n_rows, size_t dim, int bits, size_t group_size,
                          cachegen_code_stream** out);
int cachegen_quantize_f16(const uint16_t* x, size_t n_rows, size_t dim, int bits, size_t group_size,
                          cachegen_code_stream** out);
void cachegen_code_stream_free(cachegen_code_stream* stream);

size_t cachegen_code_stream_n_rows(const cachegen_code_stream* stream);
size_t cachegen_code_stream_dim(const cachegen_code_stream* stream);
int cachegen_code_stream_bits(const cachegen_code_stream* stream);
/* Codes of the real rows, [n_rows, dim], copied into out (out_len >= n_rows * dim). */
int cachegen_code_stream_codes(const cachegen_code_stream* stream, uint8_t* out, size_t out_len);

/* fp16 reconstruction into out[n_rows * dim] (bit patterns). */
int cachegen_dequant(const cachegen_code_stream* stream, uint16_t* out, size_t out_len);
/* The reference's estimate and fixed-width sizes, in bytes. */
int cachegen_entropy_coded_bytes(const cachegen_code_stream* stream, int use_delta, int per_channel,
                                 size_t* out_bytes);
int cachegen_fixed_width_bytes(const cachegen_code_stream* stream, size_t* out_bytes);
/* Layer-wise bit schedule into out[n_layers]. */
int cachegen_layer_group_bits(int n_layers, int base_bits, int n_groups, int* out, size_t out_len);

/* Releases a buffer the library allocated (uint8_t** / char** out-parameters). NULL is a no-op. */
void cachegen_free(void* buffer);

/* ---- Encoding a KV tensor into .cgkv bytes ------------------------------------------------ */

/* Element types of a KV tensor (frozen values). */
enum { CACHEGEN_DTYPE_F16 = 0, CACHEGEN_DTYPE_BF16 = 1, CACHEGEN_DTYPE_F32 = 2 };

/* The options of `cachegen encode` (same names, same defaults; docs/QUALITY_LEVELS.md). Fill it
 * with cachegen_encode_options_init, then change fields: the same options give the same bytes
 * as the CLI. */
typedef struct cachegen_encode_options {
  size_t struct_size;   /* sizeof(cachegen_encode_options), set by init: lets the struct grow */
  int bits;             /* bits of the shallowest layer group, 1..8 (default 4) */
  int layer_groups;     /* layer groups of the bit schedule (default 3) */
  size_t group_size;    /* tokens per quantization group (default 32) */
  size_t chunk_tokens;  /* tokens per chunk, a multiple of group_size (0, the default: 256,
                         * or 1024 lossless) */
  const char* level;    /* NULL/"" = the fields above; "lossless" | "high" | "medium" | "low"
                           replace them. Read during the call only. */
  int reference_params; /* nonzero: the bit-exact reference quantizer's parameters */
  int lossless;         /* nonzero: exact fp16 (float16 input only) */
  float rope_base;      /* > 0: keys quantized pre-RoPE with these parameters (with a level) */
  int rope_dims;        /* rotated dims per head; 0 = head_dim */
  float rope_scale;     /* linear frequency scale (default 1) */
  int rope_neox;        /* nonzero: NEOX pairing (i, i + n/2) */
  /* Optional token ids of the tokens encoded (n_token_ids of them; NULL/0 = none), stored in
   * the file's token_ids blob: the context store checks them when a chunk is loaded. */
  const int32_t* token_ids;
  size_t n_token_ids;
} cachegen_encode_options;

/* Sets *options to the defaults (and struct_size). */
void cachegen_encode_options_init(cachegen_encode_options* options);

/* Encodes kv, one C-order array [n_layers, 2, n_tokens, n_kv_heads, head_dim] (K then V) of
 * `dtype`, into a .cgkv: *out (cachegen_free) of *out_size bytes. options NULL = defaults.
 * Errors: INVALID_ARGUMENT for a bad shape (n_layers 1..4096, heads and head_dim 1..65536),
 * dtype or option, naming it. Thread-safe. */
int cachegen_encode(const void* kv, int dtype, size_t n_layers, size_t n_tokens, size_t n_kv_heads,
                    size_t head_dim, const cachegen_encode_options* options, uint8_t** out,
                    size_t* out_size);
/* The same with each layer in its own array: layers[l] is [2, n_tokens, n_kv_heads, head_dim].
 * Gives the same bytes as cachegen_encode of the layers stacked. Thread-safe. */
int cachegen_encode_layers(const void* const* layers, int dtype, size_t n_layers, size_t n_tokens,
                           size_t n_kv_heads, size_t head_dim,
                           const cachegen_encode_options* options, uint8_t** out, size_t* out_size);

/* ---- Reading a .cgkv ------------------------------------------------------------------------
 * A reader is immutable once opened: any number of threads may call the reader functions on one
 * handle at once. Every byte is treated as hostile: CORRUPT_INPUT, TRUNCATED_INPUT or
 * UNSUPPORTED_VERSION name the field, chunk or offset. */
typedef struct cachegen_reader cachegen_reader;

/* A reader over a copy of data[0, size) (the caller's buffer may be released after the call). */
int cachegen_reader_open_bytes(const uint8_t* data, size_t size, cachegen_reader** out);
/* A reader over a file: only the header is read now, chunks on demand. IO_ERROR / NOT_FOUND. */
int cachegen_reader_open_file(const char* path, cachegen_reader** out);
void cachegen_reader_free(cachegen_reader* reader);

typedef struct cachegen_info {
  size_t struct_size; /* set by the caller: sizeof(cachegen_info) */
  uint64_t file_bytes;
  int version;               /* container format version */
  int codec;                 /* 0 = quantized, 1 = lossless fp16 */
  size_t n_layers;           /* model layers */
  size_t n_attention_layers; /* layers with K/V: the first axis of a decode */
  size_t n_kv_heads, head_dim, n_tokens, group_size, chunk_tokens, n_chunks;
} cachegen_info;

/* Fills *info (info->struct_size must be at least sizeof(cachegen_info) as compiled by the
 * caller; INVALID_ARGUMENT otherwise). */
int cachegen_reader_info(const cachegen_reader* reader, cachegen_info* info);
/* `cachegen inspect --json`'s description as NUL-terminated JSON text in *out_json
 * (cachegen_free); checks every chunk and blob checksum. */
int cachegen_reader_inspect_json(const cachegen_reader* reader, char** out_json);
/* Elements (fp16 values) of a decode of tokens [begin, end):
 * n_attention_layers * 2 * (end - begin) * n_kv_heads * head_dim. INVALID_ARGUMENT when
 * begin > end or end > n_tokens. */
int cachegen_reader_decode_elements(const cachegen_reader* reader, size_t begin, size_t end,
                                    size_t* out_elements);
/* Decodes tokens [begin, end) into out[0, out_len) as fp16 bit patterns,
 * [n_attention_layers, 2, end - begin, n_kv_heads, head_dim]: reads and verifies only the chunks
 * that overlap the range. OUTPUT_TOO_SMALL when out_len is under decode_elements (nothing is
 * written then). */
int cachegen_reader_decode(const cachegen_reader* reader, size_t begin, size_t end, uint16_t* out,
                           size_t out_len);
/* Verifies every chunk and blob checksum and decodes every chunk. */
int cachegen_reader_verify(const cachegen_reader* reader);

/* ---- Stores (store.h): key -> bytes, in a directory or in Redis ----------------------------
 * Keys are NUL-terminated, 1..255 bytes, no control bytes. Every store function may be called
 * from several threads on one handle at once (a Redis store serialises them on its connection). */
typedef struct cachegen_store cachegen_store;

/* Opens file://DIR, a plain DIR, or redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]. create nonzero:
 * a missing DIR is created; zero: it is NOT_FOUND. INVALID_ARGUMENT names what is wrong with a
 * URL; UNAVAILABLE when a Redis server cannot be reached. */
int cachegen_store_open(const char* url, int create, cachegen_store** out);
void cachegen_store_free(cachegen_store* store);
/* The store's URL (NUL-terminated) into *out_url (cachegen_free). */
int cachegen_store_url(const cachegen_store* store, char** out_url);
/* Stores value[0, size) under key, replacing any previous value atomically. */
int cachegen_store_put(cachegen_store* store, const char* key, const uint8_t* value, size_t size);
/* The value under key into *out (cachegen_free; NULL for an empty value), *out_size bytes.
 * NOT_FOUND when there is none; CORRUPT_INPUT when stored bytes fail verification. */
int cachegen_store_get(cachegen_store* store, const char* key, uint8_t** out, size_t* out_size);
/* *out_exists = 1 when a value is stored under key, else 0. */
int cachegen_store_exists(cachegen_store* store, const char* key, int* out_exists);
/* Deletes key; *out_removed (may be NULL) = 1 when it existed, else 0. */
int cachegen_store_remove(cachegen_store* store, const char* key, int* out_removed);
/* Every key starting with prefix (NULL or "" = all), sorted bytewise: *out_keys (cachegen_free)
 * holds *out_count NUL-terminated keys one after another (NULL when there are none). */
int cachegen_store_list(cachegen_store* store, const char* prefix, char** out_keys,
                        size_t* out_count);

/* ---- The context store (context_store.h): prefix-keyed KV chunks ---------------------------
 * A context's tokens are cut into chunks of chunk_tokens; chunk i is found only after exactly the
 * same tokens 0 .. (i + 1) * chunk_tokens, for the same model fingerprint. Thread safety: as its
 * store's. */
typedef struct cachegen_context_store cachegen_context_store;

/* A context store over `store` (which must outlive it) for the model identified by
 * fingerprint[0, fingerprint_size) (any bytes). chunk_tokens 0 = the default (256). */
int cachegen_context_store_create(cachegen_store* store, const uint8_t* fingerprint,
                                  size_t fingerprint_size, size_t chunk_tokens,
                                  cachegen_context_store** out);
void cachegen_context_store_free(cachegen_context_store* context);
/* The number of leading whole chunks of tokens[0, n_tokens) that are stored (at any level). */
int cachegen_context_lookup(const cachegen_context_store* context, const int32_t* tokens,
                            size_t n_tokens, size_t* out_n_chunks);
/* Stores chunk `index` of tokens (n_tokens >= (index + 1) * chunk_tokens) at `level`
 * (1..32 bytes of [a-z0-9_-]): value[0, size), a .cgkv of the chunk's tokens whose token_ids
 * blob holds them. Idempotent. */
int cachegen_context_save(cachegen_context_store* context, const int32_t* tokens, size_t n_tokens,
                          size_t index, const char* level, const uint8_t* value, size_t size);
/* The value of chunk `index` at `level`, verified (size, checksum, token ids), into *out
 * (cachegen_free), *out_size bytes. NOT_FOUND when the chunk or the level is not stored. */
int cachegen_context_load(const cachegen_context_store* context, const int32_t* tokens,
                          size_t n_tokens, size_t index, const char* level, uint8_t** out,
                          size_t* out_size);
/* The levels chunk `index` is stored at: *out_levels (cachegen_free) holds *out_count
 * NUL-terminated names one after another (sorted). NOT_FOUND when the chunk is not stored. */
int cachegen_context_levels(const cachegen_context_store* context, const int32_t* tokens,
                            size_t n_tokens, size_t index, char** out_levels, size_t* out_count);

/* ---- llama.cpp (only in builds with CACHEGEN_WITH_LLAMA=ON) ---------------------------------
 * These functions live in the library cachegen_capi_llama, next to cachegen_llama (not in
 * libcachegen); they are declared only when CACHEGEN_HAS_LLAMA is defined, which linking the
 * CMake target cachegen_capi_llama does (a build without llama.cpp has no such target, so a
 * consumer can test `#ifdef CACHEGEN_HAS_LLAMA` at compile time). Pack/unpack give exactly the
 * bytes of `cachegen llama pack` / `unpack` (one library function builds both).
 * Thread safety: a model handle may be used from several threads at once; a llama_context must
 * be used by one thread at a time (llama.cpp's rule), so capture/restore on one context must
 * not overlap other calls on it. Pack and unpack without a model are thread-safe. */
#ifdef CACHEGEN_HAS_LLAMA

struct llama_context;

/* A GGUF model loaded by cachegen (CPU, weights only; no context). */
typedef struct cachegen_llama_model cachegen_llama_model;

/* Loads gguf_path. NOT_FOUND when there is no such file, CORRUPT_INPUT when llama.cpp cannot
 * load it. */
int cachegen_llama_model_open(const char* gguf_path, cachegen_llama_model** out);
void cachegen_llama_model_free(cachegen_llama_model* model);

/* The level options of `cachegen llama pack` (same names, same defaults). Fill it with
 * cachegen_llama_options_init, then change fields. */
typedef struct cachegen_llama_options {
  size_t struct_size;  /* sizeof(cachegen_llama_options), set by init */
  const char* level;   /* "lossless" | "high" (default) | "medium" | "low"; read during the call */
  int lossless;        /* nonzero: the exact f16 K/V (same as level "lossless") */
  int bits;            /* 1..8: uniform bits for K and V instead of a level; 0 (default): level */
  size_t group_size;   /* tokens per quantization group, with bits (default 32) */
  size_t chunk_tokens; /* tokens per container chunk; 0 (default): the level's default */
} cachegen_llama_options;

void cachegen_llama_options_init(cachegen_llama_options* options);

/* Packs a llama.cpp state file (the bytes llama_state_seq_save_file / llama_state_save_file
 * write) into a .cgkv: *out (cachegen_free), *out_size bytes. model (may be NULL) is the model
 * that wrote the state: recorded so restores into another model are refused; the quality levels
 * need it to store keys pre-RoPE and recompute layer 0 (without it they store both, larger).
 * options NULL = defaults. CORRUPT_INPUT / TRUNCATED_INPUT / UNSUPPORTED_VERSION name the
 * state-file field; INVALID_ARGUMENT names a bad option. */
int cachegen_llama_pack(const uint8_t* state, size_t state_size, const cachegen_llama_model* model,
                        const cachegen_llama_options* options, uint8_t** out, size_t* out_size);
/* Rebuilds the state file from a .cgkv written by cachegen_llama_pack (or a capture): *out
 * (cachegen_free), *out_size bytes; the exact original bytes at a lossless level. model (may be
 * NULL) is needed when the file recomputes layer 0 (quality levels packed with a model):
 * INVALID_ARGUMENT without it or with another model. */
int cachegen_llama_unpack(const uint8_t* data, size_t size, const cachegen_llama_model* model,
                          uint8_t** out, size_t* out_size);

/* Captures sequence seq_id of ctx (a context of model's weights, made with llama.cpp's own API)
 * into a .cgkv at options' level (NULL = defaults): *out (cachegen_free), *out_size bytes.
 * tokens[0, n_tokens) are the token ids of the sequence's cells, one per cell (INVALID_ARGUMENT
 * otherwise); quality levels recompute layer 0 from them on restore. */
int cachegen_llama_capture(const cachegen_llama_model* model, struct llama_context* ctx,
                           int32_t seq_id, const int32_t* tokens, size_t n_tokens,
                           const cachegen_llama_options* options, uint8_t** out, size_t* out_size);
/* Restores a .cgkv written by cachegen_llama_capture (or a pack of a sequence state file with
 * the model) into sequence seq_id of ctx, whose cache for it should be empty. INVALID_ARGUMENT
 * for a file of another model, a session (not sequence) state or more cells than n_ctx;
 * CORRUPT_INPUT when llama.cpp rejects the state (another V layout or K/V type). *out_n_tokens
 * (may be NULL) = the cells restored. */
int cachegen_llama_restore(const cachegen_llama_model* model, struct llama_context* ctx,
                           int32_t seq_id, const uint8_t* data, size_t size, size_t* out_n_tokens);

#endif /* CACHEGEN_HAS_LLAMA */

#ifdef __cplusplus
}
#endif

#endif /* CACHEGEN_C_H */
