/* The whole C API from C99: every function, every documented error status with its
 * cachegen_last_error() text. Exits non-zero on the first mismatch, naming it.
 *   capi_consumer WORK_DIR [REDIS_URL]
 * WORK_DIR: an existing, writable directory (files and a file store go there). REDIS_URL: a
 * running redis-server to run the store checks against too (optional). */
#include <cachegen/cachegen_c.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

enum { L = 3, T = 96, H = 2, D = 16 };
#define N_KV ((size_t)L * 2 * T * H * D)

static void status_and_quant(void) {
  static const char* names[] = {"ok",
                                "invalid_argument",
                                "corrupt_input",
                                "truncated_input",
                                "output_too_small",
                                "unsupported_version",
                                "io_error",
                                "out_of_memory",
                                "not_found",
                                "unavailable"};
  int i;
  float x[64 * 4];
  uint16_t xh[64 * 4], back[64 * 4];
  uint8_t codes[64 * 4];
  int sched[8];
  size_t bytes = 0;
  cachegen_code_stream* s = NULL;
  for (i = 0; i <= CACHEGEN_UNAVAILABLE; ++i) CHECK(strcmp(cachegen_status_name(i), names[i]) == 0);
  CHECK(strcmp(cachegen_status_name(-1), "unknown_status") == 0);
  CHECK(strcmp(cachegen_status_name(99), "unknown_status") == 0);
  CHECK(cachegen_version()[0] >= '0' && strchr(cachegen_version(), '.') != NULL);
  cachegen_free(NULL);

  for (i = 0; i < 64 * 4; ++i) {
    x[i] = (float)(i % 13) * 0.25f;
    xh[i] = (uint16_t)(0x3C00 + (i % 7)); /* fp16 1.0 .. 1.004 */
  }
  EXPECT(cachegen_quantize_f32(x, 64, 4, 9, 32, &s), CACHEGEN_INVALID_ARGUMENT, "bits");
  CHECK(s == NULL);
  EXPECT(cachegen_quantize_f32(NULL, 64, 4, 4, 32, &s), CACHEGEN_INVALID_ARGUMENT, "x is NULL");
  EXPECT(cachegen_quantize_f32(x, 64, 4, 4, 32, NULL), CACHEGEN_INVALID_ARGUMENT, "out is NULL");
  EXPECT(cachegen_quantize_f32(x, SIZE_MAX, 4, 4, 32, &s), CACHEGEN_INVALID_ARGUMENT, "overflows");
  OK(cachegen_quantize_f16(xh, 64, 4, 8, 32, &s));
  CHECK(cachegen_code_stream_n_rows(s) == 64 && cachegen_code_stream_dim(s) == 4);
  CHECK(cachegen_code_stream_bits(s) == 8);
  CHECK(cachegen_code_stream_n_rows(NULL) == 0 && cachegen_code_stream_dim(NULL) == 0 &&
        cachegen_code_stream_bits(NULL) == 0);
  OK(cachegen_code_stream_codes(s, codes, sizeof codes));
  EXPECT(cachegen_code_stream_codes(s, codes, 10), CACHEGEN_OUTPUT_TOO_SMALL, "fewer");
  EXPECT(cachegen_code_stream_codes(NULL, codes, 10), CACHEGEN_INVALID_ARGUMENT, "stream is NULL");
  OK(cachegen_dequant(s, back, 64 * 4));
  for (i = 0; i < 64 * 4; ++i) CHECK(back[i] >= 0x3C00 && back[i] <= 0x3C07);
  EXPECT(cachegen_dequant(s, back, 3), CACHEGEN_OUTPUT_TOO_SMALL, "fewer");
  EXPECT(cachegen_dequant(NULL, back, 3), CACHEGEN_INVALID_ARGUMENT, "stream is NULL");
  OK(cachegen_entropy_coded_bytes(s, 1, 1, &bytes));
  CHECK(bytes > 0);
  EXPECT(cachegen_entropy_coded_bytes(s, 1, 1, NULL), CACHEGEN_INVALID_ARGUMENT, "out_bytes");
  cachegen_code_stream_free(s);
  s = NULL;
  OK(cachegen_quantize_f32(x, 64, 4, 4, 32, &s));
  OK(cachegen_fixed_width_bytes(s, &bytes));
  CHECK(bytes == 64 * 4 * 4 / 8 + 2 * 4 * 4);
  EXPECT(cachegen_fixed_width_bytes(NULL, &bytes), CACHEGEN_INVALID_ARGUMENT, "stream is NULL");
  cachegen_code_stream_free(s);
  cachegen_code_stream_free(NULL);
  OK(cachegen_layer_group_bits(8, 4, 3, sched, 8));
  CHECK(sched[0] == 4 && sched[7] <= 4);
  EXPECT(cachegen_layer_group_bits(8, 4, 3, sched, 2), CACHEGEN_OUTPUT_TOO_SMALL, "n_layers");
}

/* A deterministic KV tensor [L, 2, T, H, D], fp32. */
static float* make_kv(void) {
  float* kv = (float*)malloc(N_KV * sizeof(float));
  uint32_t state = 12345u;
  size_t i;
  CHECK(kv != NULL);
  for (i = 0; i < N_KV; ++i) {
    state = state * 1664525u + 1013904223u;
    kv[i] = (float)((int)(state >> 16) % 2001 - 1000) / 250.0f + (float)(i % D) * 0.1f;
  }
  return kv;
}

static void write_file(const char* path, const uint8_t* data, size_t size) {
  FILE* f = fopen(path, "wb");
  CHECK(f != NULL);
  CHECK(fwrite(data, 1, size, f) == size);
  CHECK(fclose(f) == 0);
}

/* Encodes, reads back, and checks every reader function; returns the .cgkv (cachegen_free). */
static uint8_t* encode_and_read(const char* dir, size_t* cgkv_size) {
  float* kv = make_kv();
  const void* layers[L];
  cachegen_encode_options o;
  uint8_t *a = NULL, *b = NULL, *lossless = NULL;
  size_t a_size = 0, b_size = 0, lossless_size = 0, n = 0, i;
  uint16_t *full, *range, *again;
  cachegen_reader *r = NULL, *rl = NULL, *rf = NULL;
  cachegen_info info;
  char* json = NULL;
  char path[4096];
  int l;

  cachegen_encode_options_init(&o);
  cachegen_encode_options_init(NULL);
  CHECK(o.struct_size == sizeof o && o.bits == 4 && o.layer_groups == 3 && o.group_size == 32 &&
        o.chunk_tokens == 0 && o.level == NULL && o.rope_scale == 1.0f);
  o.chunk_tokens = 32;
  OK(cachegen_encode(kv, CACHEGEN_DTYPE_F32, L, T, H, D, &o, &a, &a_size));
  CHECK(a != NULL && a_size > 64);
  for (l = 0; l < L; ++l) layers[l] = kv + (size_t)l * 2 * T * H * D;
  OK(cachegen_encode_layers(layers, CACHEGEN_DTYPE_F32, L, T, H, D, &o, &b, &b_size));
  CHECK(b_size == a_size && memcmp(a, b, a_size) == 0); /* per layer = stacked, byte for byte */
  cachegen_free(b);
  b = NULL;
  OK(cachegen_encode(kv, CACHEGEN_DTYPE_F32, L, T, H, D, NULL, &b, &b_size)); /* defaults */
  CHECK(b_size > 0);
  cachegen_free(b);

  /* Encode errors: status, message, and cleared outputs. */
  EXPECT(cachegen_encode(kv, 7, L, T, H, D, &o, &b, &b_size), CACHEGEN_INVALID_ARGUMENT, "dtype");
  CHECK(b == NULL && b_size == 0);
  EXPECT(cachegen_encode(kv, CACHEGEN_DTYPE_F32, 0, T, H, D, &o, &b, &b_size),
         CACHEGEN_INVALID_ARGUMENT, "n_layers");
  EXPECT(cachegen_encode(kv, CACHEGEN_DTYPE_F32, L, T, 0, D, &o, &b, &b_size),
         CACHEGEN_INVALID_ARGUMENT, "n_kv_heads");
  EXPECT(cachegen_encode(NULL, CACHEGEN_DTYPE_F32, L, T, H, D, &o, &b, &b_size),
         CACHEGEN_INVALID_ARGUMENT, "kv is NULL");
  EXPECT(cachegen_encode(kv, CACHEGEN_DTYPE_F32, L, T, H, D, &o, NULL, &b_size),
         CACHEGEN_INVALID_ARGUMENT, "out is NULL");
  EXPECT(cachegen_encode_layers(NULL, CACHEGEN_DTYPE_F32, L, T, H, D, &o, &b, &b_size),
         CACHEGEN_INVALID_ARGUMENT, "layers is NULL");
  o.bits = 9;
  EXPECT(cachegen_encode(kv, CACHEGEN_DTYPE_F32, L, T, H, D, &o, &b, &b_size),
         CACHEGEN_INVALID_ARGUMENT, "base_bits");
  o.bits = 4;
  o.chunk_tokens = 33;
  EXPECT(cachegen_encode(kv, CACHEGEN_DTYPE_F32, L, T, H, D, &o, &b, &b_size),
         CACHEGEN_INVALID_ARGUMENT, "block_tokens");
  o.chunk_tokens = 32;
  o.level = "extreme";
  EXPECT(cachegen_encode(kv, CACHEGEN_DTYPE_F32, L, T, H, D, &o, &b, &b_size),
         CACHEGEN_INVALID_ARGUMENT, "level");
  o.level = "lossless";
  EXPECT(cachegen_encode(kv, CACHEGEN_DTYPE_F32, L, T, H, D, &o, &b, &b_size),
         CACHEGEN_INVALID_ARGUMENT, "float16");
  o.level = "high";
  o.rope_scale = 0.0f;
  EXPECT(cachegen_encode(kv, CACHEGEN_DTYPE_F32, L, T, H, D, &o, &b, &b_size),
         CACHEGEN_INVALID_ARGUMENT, "rope");
  cachegen_encode_options_init(&o);
  o.chunk_tokens = 32;
  o.struct_size = 4;
  EXPECT(cachegen_encode(kv, CACHEGEN_DTYPE_F32, L, T, H, D, &o, &b, &b_size),
         CACHEGEN_INVALID_ARGUMENT, "struct_size");
  o.struct_size = sizeof o;
  o.n_token_ids = 3;
  EXPECT(cachegen_encode(kv, CACHEGEN_DTYPE_F32, L, T, H, D, &o, &b, &b_size),
         CACHEGEN_INVALID_ARGUMENT, "token_ids");
  o.n_token_ids = 0;

  /* Readers: info, inspect, full and range decode, verify. */
  EXPECT(cachegen_reader_open_bytes(a, 10, &r), CACHEGEN_TRUNCATED_INPUT, "");
  CHECK(r == NULL);
  EXPECT(cachegen_reader_open_bytes(NULL, 10, &r), CACHEGEN_INVALID_ARGUMENT, "data is NULL");
  OK(cachegen_reader_open_bytes(a, a_size, &r));
  info.struct_size = sizeof info;
  OK(cachegen_reader_info(r, &info));
  CHECK(info.n_layers == L && info.n_attention_layers == L && info.n_kv_heads == H &&
        info.head_dim == D && info.n_tokens == T && info.codec == 0 && info.chunk_tokens == 32 &&
        info.n_chunks == 3 && info.file_bytes == a_size && info.group_size == 32 &&
        info.version >= 1);
  info.struct_size = 8;
  EXPECT(cachegen_reader_info(r, &info), CACHEGEN_INVALID_ARGUMENT, "struct_size");
  EXPECT(cachegen_reader_info(NULL, &info), CACHEGEN_INVALID_ARGUMENT, "reader is NULL");
  OK(cachegen_reader_inspect_json(r, &json));
  CHECK(strstr(json, "\"codec\": \"quantized\"") != NULL && strstr(json, "\"layers\"") != NULL);
  cachegen_free(json);
  EXPECT(cachegen_reader_inspect_json(NULL, &json), CACHEGEN_INVALID_ARGUMENT, "reader");
  CHECK(json == NULL);
  OK(cachegen_reader_decode_elements(r, 0, T, &n));
  CHECK(n == N_KV);
  EXPECT(cachegen_reader_decode_elements(r, 5, 4, &n), CACHEGEN_INVALID_ARGUMENT, "outside");
  EXPECT(cachegen_reader_decode_elements(r, 0, T + 1, &n), CACHEGEN_INVALID_ARGUMENT, "outside");
  full = (uint16_t*)malloc(N_KV * 2);
  range = (uint16_t*)malloc(N_KV * 2);
  again = (uint16_t*)malloc(N_KV * 2);
  CHECK(full && range && again);
  OK(cachegen_reader_decode(r, 0, T, full, N_KV));
  EXPECT(cachegen_reader_decode(r, 0, T, full, N_KV - 1), CACHEGEN_OUTPUT_TOO_SMALL, "needs");
  EXPECT(cachegen_reader_decode(r, 0, T, NULL, N_KV), CACHEGEN_INVALID_ARGUMENT, "out is NULL");
  OK(cachegen_reader_decode(r, 7, 7, NULL, 0)); /* an empty range */
  /* Tokens 40..70 cross a chunk boundary; they equal the same rows of the full decode. */
  OK(cachegen_reader_decode(r, 40, 70, range, N_KV));
  for (i = 0; i < (size_t)L * 2; ++i) {
    CHECK(memcmp(range + i * 30 * H * D, full + (i * T + 40) * H * D, 30 * H * D * 2) == 0);
  }
  OK(cachegen_reader_verify(r));
  EXPECT(cachegen_reader_verify(NULL), CACHEGEN_INVALID_ARGUMENT, "reader is NULL");

  /* Lossless: the fp16 decode, encoded exactly, decodes to the same bits. */
  o.lossless = 1;
  OK(cachegen_encode(full, CACHEGEN_DTYPE_F16, L, T, H, D, &o, &lossless, &lossless_size));
  OK(cachegen_reader_open_bytes(lossless, lossless_size, &rl));
  info.struct_size = sizeof info;
  OK(cachegen_reader_info(rl, &info));
  CHECK(info.codec == 1);
  OK(cachegen_reader_decode(rl, 0, T, again, N_KV));
  CHECK(memcmp(again, full, N_KV * 2) == 0);
  cachegen_reader_free(rl);
  rl = NULL;

  /* Files: open, and the hostile cases. */
  snprintf(path, sizeof path, "%s/kv.cgkv", dir);
  write_file(path, a, a_size);
  OK(cachegen_reader_open_file(path, &rf));
  OK(cachegen_reader_decode(rf, 40, 70, again, N_KV));
  CHECK(memcmp(again, range, 30 * H * D * 2 * L * 2) == 0);
  snprintf(path, sizeof path, "%s/missing.cgkv", dir);
  EXPECT(cachegen_reader_open_file(path, &rl), CACHEGEN_NOT_FOUND, "missing.cgkv");
  CHECK(rl == NULL);
  EXPECT(cachegen_reader_open_file(NULL, &rl), CACHEGEN_INVALID_ARGUMENT, "path is NULL");
  cachegen_reader_free(rl); /* open_file left rl NULL; this is free(NULL) */
  a[a_size - 5] ^= 0x40;    /* a flipped bit in the last chunk: its checksum fails */
  snprintf(path, sizeof path, "%s/bad.cgkv", dir);
  write_file(path, a, a_size);
  OK(cachegen_reader_open_bytes(a, a_size, &rl));
  EXPECT(cachegen_reader_verify(rl), CACHEGEN_CORRUPT_INPUT, "checksum");
  EXPECT(cachegen_reader_decode(rl, 0, T, again, N_KV), CACHEGEN_CORRUPT_INPUT, "chunk 2");
  OK(cachegen_reader_decode(rl, 0, 64, again, N_KV)); /* chunks 0 and 1 are intact */
  a[a_size - 5] ^= 0x40;
  a[0] ^= 1;
  cachegen_reader_free(rl);
  rl = NULL;
  EXPECT(cachegen_reader_open_bytes(a, a_size, &rl), CACHEGEN_CORRUPT_INPUT, "magic");
  a[0] ^= 1;

  cachegen_reader_free(r);
  cachegen_reader_free(rf);
  cachegen_reader_free(NULL);
  cachegen_free(lossless);
  free(full);
  free(range);
  free(again);
  free(kv);
  *cgkv_size = a_size;
  return a;
}

/* put/get/exists/remove/list/url on one store. */
static void store_checks(const char* url, const uint8_t* value, size_t size) {
  cachegen_store* s = NULL;
  uint8_t* got = NULL;
  size_t got_size = 0, count = 0;
  char *keys = NULL, *u = NULL;
  int flag = -1;
  OK(cachegen_store_open(url, 1, &s));
  OK(cachegen_store_url(s, &u));
  CHECK(u != NULL && strlen(u) > 0);
  cachegen_free(u);
  OK(cachegen_store_remove(s, "capi/a", NULL));
  OK(cachegen_store_remove(s, "capi/b", NULL));
  OK(cachegen_store_put(s, "capi/a", value, size));
  OK(cachegen_store_put(s, "capi/b", NULL, 0)); /* an empty value */
  OK(cachegen_store_get(s, "capi/a", &got, &got_size));
  CHECK(got_size == size && memcmp(got, value, size) == 0);
  cachegen_free(got);
  OK(cachegen_store_get(s, "capi/b", &got, &got_size));
  CHECK(got == NULL && got_size == 0);
  OK(cachegen_store_exists(s, "capi/a", &flag));
  CHECK(flag == 1);
  OK(cachegen_store_list(s, "capi/", &keys, &count));
  CHECK(count == 2 && strcmp(keys, "capi/a") == 0 && strcmp(keys + 7, "capi/b") == 0);
  cachegen_free(keys);
  OK(cachegen_store_list(s, "nothing-here/", &keys, &count));
  CHECK(count == 0 && keys == NULL);
  OK(cachegen_store_remove(s, "capi/a", &flag));
  CHECK(flag == 1);
  OK(cachegen_store_remove(s, "capi/a", &flag));
  CHECK(flag == 0);
  OK(cachegen_store_exists(s, "capi/a", &flag));
  CHECK(flag == 0);
  EXPECT(cachegen_store_get(s, "capi/a", &got, &got_size), CACHEGEN_NOT_FOUND, "capi/a");
  CHECK(got == NULL && got_size == 0);
  EXPECT(cachegen_store_put(s, "", value, size), CACHEGEN_INVALID_ARGUMENT, "key");
  EXPECT(cachegen_store_put(s, "bad\nkey", value, size), CACHEGEN_INVALID_ARGUMENT, "control");
  EXPECT(cachegen_store_put(s, NULL, value, size), CACHEGEN_INVALID_ARGUMENT, "key is NULL");
  EXPECT(cachegen_store_put(s, "k", NULL, 3), CACHEGEN_INVALID_ARGUMENT, "value is NULL");
  EXPECT(cachegen_store_put(NULL, "k", value, 3), CACHEGEN_INVALID_ARGUMENT, "store is NULL");
  EXPECT(cachegen_store_get(s, "k", NULL, &got_size), CACHEGEN_INVALID_ARGUMENT, "out is NULL");
  EXPECT(cachegen_store_exists(s, "k", NULL), CACHEGEN_INVALID_ARGUMENT, "out_exists");
  EXPECT(cachegen_store_remove(NULL, "k", NULL), CACHEGEN_INVALID_ARGUMENT, "store is NULL");
  EXPECT(cachegen_store_list(s, NULL, NULL, &count), CACHEGEN_INVALID_ARGUMENT, "out_keys");
  EXPECT(cachegen_store_url(NULL, &u), CACHEGEN_INVALID_ARGUMENT, "store is NULL");
  OK(cachegen_store_remove(s, "capi/b", NULL));
  cachegen_store_free(s);
}

static void stores(const char* dir, const char* redis_url, const uint8_t* value, size_t size) {
  char url[4096];
  cachegen_store* s = NULL;
  snprintf(url, sizeof url, "file://%s/store", dir);
  store_checks(url, value, size);
  if (redis_url != NULL) store_checks(redis_url, value, size);
  snprintf(url, sizeof url, "file://%s/absent", dir);
  EXPECT(cachegen_store_open(url, 0, &s), CACHEGEN_NOT_FOUND, "absent");
  CHECK(s == NULL);
  EXPECT(cachegen_store_open("redis://", 1, &s), CACHEGEN_INVALID_ARGUMENT, "host");
  EXPECT(cachegen_store_open("redis://127.0.0.1:1/0", 1, &s), CACHEGEN_UNAVAILABLE, "127.0.0.1");
  EXPECT(cachegen_store_open(NULL, 1, &s), CACHEGEN_INVALID_ARGUMENT, "url is NULL");
  EXPECT(cachegen_store_open(url, 1, NULL), CACHEGEN_INVALID_ARGUMENT, "out is NULL");
}

/* The context store: chunks of 32 tokens encoded with their token ids. */
static void context(const char* dir) {
  enum { CT = 32, NT = 80 };
  int32_t tokens[NT], other[NT];
  /* The first L * 2 * CT * H * D values of make_kv() as one [L, 2, CT, H, D] array: a chunk. */
  float* kv = make_kv();
  cachegen_encode_options o;
  cachegen_store* s = NULL;
  cachegen_context_store* c = NULL;
  uint8_t *v0 = NULL, *v1 = NULL, *got = NULL;
  size_t s0 = 0, s1 = 0, got_size = 0, n = 99;
  char url[4096];
  char* levels = NULL;
  int i;
  for (i = 0; i < NT; ++i) tokens[i] = other[i] = 1000 + i;
  other[40] = 7;
  cachegen_encode_options_init(&o);
  o.chunk_tokens = CT;
  o.token_ids = tokens;
  o.n_token_ids = CT;
  OK(cachegen_encode(kv, CACHEGEN_DTYPE_F32, L, CT, H, D, &o, &v0, &s0));
  o.token_ids = tokens + CT;
  OK(cachegen_encode(kv, CACHEGEN_DTYPE_F32, L, CT, H, D, &o, &v1, &s1));

  snprintf(url, sizeof url, "file://%s/context", dir);
  OK(cachegen_store_open(url, 1, &s));
  EXPECT(cachegen_context_store_create(NULL, NULL, 0, CT, &c), CACHEGEN_INVALID_ARGUMENT,
         "store is NULL");
  OK(cachegen_context_store_create(s, (const uint8_t*)"model-a", 7, CT, &c));
  OK(cachegen_context_lookup(c, tokens, NT, &n));
  CHECK(n == 0);
  OK(cachegen_context_save(c, tokens, NT, 0, "high", v0, s0));
  OK(cachegen_context_save(c, tokens, NT, 1, "high", v1, s1));
  OK(cachegen_context_save(c, tokens, NT, 1, "low", v1, s1));
  OK(cachegen_context_lookup(c, tokens, NT, &n));
  CHECK(n == 2);
  OK(cachegen_context_lookup(c, other, NT, &n)); /* differs in chunk 1 */
  CHECK(n == 1);
  OK(cachegen_context_levels(c, tokens, NT, 1, &levels, &n));
  CHECK(n == 2 && strcmp(levels, "high") == 0 && strcmp(levels + 5, "low") == 0);
  cachegen_free(levels);
  OK(cachegen_context_load(c, tokens, NT, 1, "low", &got, &got_size));
  CHECK(got_size == s1 && memcmp(got, v1, s1) == 0);
  cachegen_free(got);
  EXPECT(cachegen_context_load(c, tokens, NT, 0, "low", &got, &got_size), CACHEGEN_NOT_FOUND,
         "level 'low'");
  CHECK(got == NULL && got_size == 0);
  EXPECT(cachegen_context_load(c, other, NT, 1, "high", &got, &got_size), CACHEGEN_NOT_FOUND,
         "not stored");
  EXPECT(cachegen_context_levels(c, other, NT, 1, &levels, &n), CACHEGEN_NOT_FOUND, "not stored");
  EXPECT(cachegen_context_load(c, tokens, NT, 2, "high", &got, &got_size),
         CACHEGEN_INVALID_ARGUMENT, "needs 96 tokens");
  EXPECT(cachegen_context_save(c, tokens, NT, 2, "high", v0, s0), CACHEGEN_INVALID_ARGUMENT,
         "needs 96 tokens");
  EXPECT(cachegen_context_save(c, tokens, NT, 0, "Bad Level", v0, s0), CACHEGEN_INVALID_ARGUMENT,
         "level");
  EXPECT(cachegen_context_save(c, tokens, NT, 0, NULL, v0, s0), CACHEGEN_INVALID_ARGUMENT,
         "level is NULL");
  EXPECT(cachegen_context_lookup(c, NULL, NT, &n), CACHEGEN_INVALID_ARGUMENT, "tokens is NULL");
  EXPECT(cachegen_context_lookup(NULL, tokens, NT, &n), CACHEGEN_INVALID_ARGUMENT,
         "context is NULL");
  /* A value whose token ids are not the chunk's: stored, but refused on load. */
  OK(cachegen_context_save(c, tokens, NT, 0, "low", v1, s1));
  EXPECT(cachegen_context_load(c, tokens, NT, 0, "low", &got, &got_size), CACHEGEN_CORRUPT_INPUT,
         "token");
  cachegen_context_store_free(c);
  /* Another model's fingerprint finds nothing. */
  OK(cachegen_context_store_create(s, (const uint8_t*)"model-b", 7, CT, &c));
  OK(cachegen_context_lookup(c, tokens, NT, &n));
  CHECK(n == 0);
  cachegen_context_store_free(c);
  cachegen_context_store_free(NULL);
  cachegen_store_free(s);
  cachegen_store_free(NULL);
  cachegen_free(v0);
  cachegen_free(v1);
  free(kv);
}

int main(int argc, char** argv) {
  uint8_t* cgkv;
  size_t size = 0;
  if (argc < 2) {
    fprintf(stderr, "usage: capi_consumer WORK_DIR [REDIS_URL]\n");
    return 2;
  }
  status_and_quant();
  cgkv = encode_and_read(argv[1], &size);
  stores(argv[1], argc > 2 ? argv[2] : NULL, cgkv, size);
  context(argv[1]);
  cachegen_free(cgkv);
  printf("capi_consumer: cachegen %s, %d checks passed%s\n", cachegen_version(), g_checks,
         argc > 2 ? " (with Redis)" : "");
  return 0;
}
