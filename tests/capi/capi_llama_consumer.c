/* The C API's llama.cpp functions from C99 (cachegen_c.h, "llama.cpp" section): every function,
 * every documented error status with its cachegen_last_error() text; a live llama_context made
 * with llama.cpp's own C API is captured and restored and must continue identically.
 *   capi_llama_consumer MODEL.gguf OTHER_MODEL.gguf WORK_DIR
 * Exits 77 (skipped) when MODEL.gguf does not exist. */
#include <cachegen/cachegen_c.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#endif
#include <llama.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include "../install/capi_check.h"

#ifndef CACHEGEN_HAS_LLAMA
#error "linking cachegen_capi_llama defines CACHEGEN_HAS_LLAMA"
#endif

enum { N_GEN = 8, MAX_PROMPT = 64 };

static void quiet_log(enum ggml_log_level level, const char* text, void* user) {
  (void)level;
  (void)text;
  (void)user;
}

static uint8_t* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  uint8_t* data;
  long n;
  CHECK(f != NULL);
  CHECK(fseek(f, 0, SEEK_END) == 0);
  n = ftell(f);
  CHECK(n > 0);
  rewind(f);
  data = (uint8_t*)malloc((size_t)n);
  CHECK(data != NULL);
  CHECK(fread(data, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  *size = (size_t)n;
  return data;
}

static int32_t argmax(const float* logits, int32_t n) {
  int32_t i, best = 0;
  for (i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

/* Greedy: out[0] = first, then N_GEN tokens decoded at positions pos.. of sequence 0. */
static void generate(struct llama_context* ctx, int32_t n_vocab, int32_t first, int32_t* out) {
  int i;
  out[0] = first;
  for (i = 0; i < N_GEN; ++i) {
    CHECK(llama_decode(ctx, llama_batch_get_one(&out[i], 1)) == 0);
    out[i + 1] = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
  }
}

static void clear(struct llama_context* ctx) {
  llama_memory_clear(llama_get_memory(ctx), 1);
}

int main(int argc, char** argv) {
  const char* prompt = "Once upon a time, there was a little girl who liked to play in the park.";
  char path[4096];
  FILE* probe;
  struct llama_model* lm;
  struct llama_context* ctx;
  struct llama_model_params mp;
  struct llama_context_params cp;
  const struct llama_vocab* vocab;
  int32_t tokens[MAX_PROMPT], ref[N_GEN + 1], again[N_GEN + 1], first, n_vocab, n_prompt;
  cachegen_llama_model *model = NULL, *other = NULL;
  cachegen_llama_options o;
  uint8_t *state, *cgkv = NULL, *back = NULL, *hq = NULL;
  uint8_t bad[64];
  size_t state_size, cgkv_size = 0, back_size = 0, hq_size = 0, n_restored = 0;

  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL.gguf OTHER_MODEL.gguf WORK_DIR\n", argv[0]);
    return 2;
  }
  probe = fopen(argv[1], "rb");
  if (probe == NULL) {
    fprintf(stderr, "\n*** capi_llama_consumer SKIPPED: no model at %s ***\n\n", argv[1]);
    return 77;
  }
  fclose(probe);

  /* Models: cachegen's handle, and llama.cpp's own for a live context. */
  EXPECT(cachegen_llama_model_open(NULL, &model), CACHEGEN_INVALID_ARGUMENT, "gguf_path is NULL");
  CHECK(model == NULL);
  EXPECT(cachegen_llama_model_open(argv[1], NULL), CACHEGEN_INVALID_ARGUMENT, "out is NULL");
  snprintf(path, sizeof path, "%s/missing.gguf", argv[3]);
  EXPECT(cachegen_llama_model_open(path, &model), CACHEGEN_NOT_FOUND, "missing.gguf");
  CHECK(model == NULL);
  snprintf(path, sizeof path, "%s/not.gguf", argv[3]);
  probe = fopen(path, "wb");
  CHECK(probe != NULL);
  CHECK(fputs("this is not a GGUF file", probe) >= 0);
  fclose(probe);
  EXPECT(cachegen_llama_model_open(path, &model), CACHEGEN_CORRUPT_INPUT, "not.gguf");
  CHECK(model == NULL);
  OK(cachegen_llama_model_open(argv[1], &model));
  OK(cachegen_llama_model_open(argv[2], &other));
  cachegen_llama_model_free(NULL);

  llama_log_set(quiet_log, NULL);
  llama_backend_init();
  mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  lm = llama_model_load_from_file(argv[1], mp);
  CHECK(lm != NULL);
  cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = 256;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  ctx = llama_init_from_model(lm, cp);
  CHECK(ctx != NULL);
  vocab = llama_model_get_vocab(lm);
  n_vocab = llama_vocab_n_tokens(vocab);
  n_prompt = llama_tokenize(vocab, prompt, (int32_t)strlen(prompt), tokens, MAX_PROMPT, 1, 0);
  CHECK(n_prompt > 8 && n_prompt <= MAX_PROMPT);

  /* The reference: prompt, then greedy continuation. */
  CHECK(llama_decode(ctx, llama_batch_get_one(tokens, n_prompt)) == 0);
  first = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
  snprintf(path, sizeof path, "%s/seq.state", argv[3]);
  CHECK(llama_state_seq_save_file(ctx, path, 0, tokens, (size_t)n_prompt) > 0);

  /* Capture (lossless and at level high) of the prompt's sequence. */
  cachegen_llama_options_init(NULL);
  cachegen_llama_options_init(&o);
  CHECK(o.struct_size == sizeof o && o.level == NULL && o.bits == 0 && o.lossless == 0 &&
        o.group_size == 32 && o.chunk_tokens == 0);
  o.lossless = 1;
  EXPECT(cachegen_llama_capture(NULL, ctx, 0, tokens, (size_t)n_prompt, &o, &cgkv, &cgkv_size),
         CACHEGEN_INVALID_ARGUMENT, "model is NULL");
  EXPECT(cachegen_llama_capture(model, NULL, 0, tokens, (size_t)n_prompt, &o, &cgkv, &cgkv_size),
         CACHEGEN_INVALID_ARGUMENT, "ctx is NULL");
  EXPECT(cachegen_llama_capture(model, ctx, 0, NULL, (size_t)n_prompt, &o, &cgkv, &cgkv_size),
         CACHEGEN_INVALID_ARGUMENT, "tokens is NULL");
  EXPECT(cachegen_llama_capture(model, ctx, 0, tokens, (size_t)n_prompt, &o, NULL, &cgkv_size),
         CACHEGEN_INVALID_ARGUMENT, "out is NULL");
  EXPECT(cachegen_llama_capture(model, ctx, 0, tokens, (size_t)n_prompt, &o, &cgkv, NULL),
         CACHEGEN_INVALID_ARGUMENT, "out_size is NULL");
  EXPECT(cachegen_llama_capture(model, ctx, 0, tokens, (size_t)n_prompt - 1, &o, &cgkv, &cgkv_size),
         CACHEGEN_INVALID_ARGUMENT, "tokens given for a state of");
  CHECK(cgkv == NULL && cgkv_size == 0);
  EXPECT(cachegen_llama_capture(other, ctx, 0, tokens, (size_t)n_prompt, &o, &cgkv, &cgkv_size),
         CACHEGEN_INVALID_ARGUMENT, "is not the given model");
  o.struct_size = 0;
  EXPECT(cachegen_llama_capture(model, ctx, 0, tokens, (size_t)n_prompt, &o, &cgkv, &cgkv_size),
         CACHEGEN_INVALID_ARGUMENT, "struct_size");
  cachegen_llama_options_init(&o);
  o.level = "ultra";
  EXPECT(cachegen_llama_capture(model, ctx, 0, tokens, (size_t)n_prompt, &o, &cgkv, &cgkv_size),
         CACHEGEN_INVALID_ARGUMENT, "level must be lossless, high, medium or low, not 'ultra'");
  o.level = "lossless";
  OK(cachegen_llama_capture(model, ctx, 0, tokens, (size_t)n_prompt, &o, &cgkv, &cgkv_size));
  CHECK(cgkv != NULL && cgkv_size > 0);
  OK(cachegen_llama_capture(model, ctx, 0, tokens, (size_t)n_prompt, NULL, &hq, &hq_size));
  CHECK(hq != NULL && hq_size > 0 && hq_size < cgkv_size);

  generate(ctx, n_vocab, first, ref);

  /* Restore: errors leave the context alone; a lossless restore continues identically. */
  clear(ctx);
  EXPECT(cachegen_llama_restore(NULL, ctx, 0, cgkv, cgkv_size, NULL), CACHEGEN_INVALID_ARGUMENT,
         "model is NULL");
  EXPECT(cachegen_llama_restore(model, NULL, 0, cgkv, cgkv_size, NULL), CACHEGEN_INVALID_ARGUMENT,
         "ctx is NULL");
  EXPECT(cachegen_llama_restore(model, ctx, 0, NULL, cgkv_size, NULL), CACHEGEN_INVALID_ARGUMENT,
         "data is NULL");
  EXPECT(cachegen_llama_restore(other, ctx, 0, cgkv, cgkv_size, &n_restored),
         CACHEGEN_INVALID_ARGUMENT, "is not the given model");
  memset(bad, 0x5a, sizeof bad);
  EXPECT(cachegen_llama_restore(model, ctx, 0, bad, sizeof bad, &n_restored),
         CACHEGEN_CORRUPT_INPUT, "magic");
  EXPECT(cachegen_llama_restore(model, ctx, 0, cgkv, 16, &n_restored), CACHEGEN_TRUNCATED_INPUT,
         "");
  CHECK(n_restored == 0);
  OK(cachegen_llama_restore(model, ctx, 0, cgkv, cgkv_size, &n_restored));
  CHECK(n_restored == (size_t)n_prompt);
  generate(ctx, n_vocab, first, again);
  CHECK(memcmp(ref, again, sizeof ref) == 0);

  /* Level high: layer 0 recomputed from the weights; the next greedy token is the same. */
  clear(ctx);
  OK(cachegen_llama_restore(model, ctx, 0, hq, hq_size, NULL));
  generate(ctx, n_vocab, first, again);
  CHECK(again[1] == ref[1]);
  cachegen_free(hq);
  hq = NULL;

  /* The capture of another model's file is refused on restore (identity recorded). */
  {
    struct llama_model* olm = llama_model_load_from_file(argv[2], mp);
    struct llama_context* octx;
    CHECK(olm != NULL);
    octx = llama_init_from_model(olm, cp);
    CHECK(octx != NULL);
    EXPECT(cachegen_llama_restore(other, octx, 0, cgkv, cgkv_size, NULL), CACHEGEN_INVALID_ARGUMENT,
           "refusing to restore a KV cache of model");
    llama_free(octx);
    llama_model_free(olm);
  }
  cachegen_free(cgkv);
  cgkv = NULL;

  /* Pack / unpack the state file llama_state_seq_save_file wrote. */
  snprintf(path, sizeof path, "%s/seq.state", argv[3]);
  state = read_file(path, &state_size);
  EXPECT(cachegen_llama_pack(NULL, state_size, model, NULL, &cgkv, &cgkv_size),
         CACHEGEN_INVALID_ARGUMENT, "state is NULL");
  EXPECT(cachegen_llama_pack(state, state_size, model, NULL, NULL, &cgkv_size),
         CACHEGEN_INVALID_ARGUMENT, "out is NULL");
  EXPECT(cachegen_llama_pack(state, state_size, model, NULL, &cgkv, NULL),
         CACHEGEN_INVALID_ARGUMENT, "out_size is NULL");
  EXPECT(cachegen_llama_pack(bad, sizeof bad, model, NULL, &cgkv, &cgkv_size),
         CACHEGEN_CORRUPT_INPUT, "magic");
  CHECK(cgkv == NULL && cgkv_size == 0);
  EXPECT(cachegen_llama_pack(state, state_size / 2, model, NULL, &cgkv, &cgkv_size),
         CACHEGEN_TRUNCATED_INPUT, "");
  EXPECT(cachegen_llama_pack(state, 0, model, NULL, &cgkv, &cgkv_size), CACHEGEN_TRUNCATED_INPUT,
         "");
  cachegen_llama_options_init(&o);
  o.bits = 9;
  EXPECT(cachegen_llama_pack(state, state_size, NULL, &o, &cgkv, &cgkv_size),
         CACHEGEN_INVALID_ARGUMENT, "bits");
  o.bits = 4;
  OK(cachegen_llama_pack(state, state_size, NULL, &o, &cgkv, &cgkv_size));
  OK(cachegen_llama_unpack(cgkv, cgkv_size, NULL, &back, &back_size));
  CHECK(back_size == state_size);
  cachegen_free(back);
  cachegen_free(cgkv);
  /* Lossless: the exact bytes back, with or without the model. */
  o.bits = 0;
  o.lossless = 1;
  OK(cachegen_llama_pack(state, state_size, model, &o, &cgkv, &cgkv_size));
  OK(cachegen_llama_unpack(cgkv, cgkv_size, NULL, &back, &back_size));
  CHECK(back_size == state_size && memcmp(back, state, state_size) == 0);
  cachegen_free(back);
  OK(cachegen_llama_unpack(cgkv, cgkv_size, model, &back, &back_size));
  CHECK(back_size == state_size && memcmp(back, state, state_size) == 0);
  cachegen_free(back);
  cachegen_free(cgkv);
  /* Level high with the model: unpack needs it (layer 0 recomputed), and no other model. */
  OK(cachegen_llama_pack(state, state_size, model, NULL, &cgkv, &cgkv_size));
  EXPECT(cachegen_llama_unpack(cgkv, cgkv_size, NULL, &back, &back_size), CACHEGEN_INVALID_ARGUMENT,
         "restoring needs the model");
  CHECK(back == NULL && back_size == 0);
  EXPECT(cachegen_llama_unpack(cgkv, cgkv_size, other, &back, &back_size),
         CACHEGEN_INVALID_ARGUMENT, "the file was written for model");
  OK(cachegen_llama_unpack(cgkv, cgkv_size, model, &back, &back_size));
  CHECK(back_size == state_size);
  cachegen_free(back);
  /* The packed sequence state restores into the live context too. */
  clear(ctx);
  OK(cachegen_llama_restore(model, ctx, 0, cgkv, cgkv_size, &n_restored));
  CHECK(n_restored == (size_t)n_prompt);
  cachegen_free(cgkv);
  /* Unpack's own errors. */
  EXPECT(cachegen_llama_unpack(NULL, 8, model, &back, &back_size), CACHEGEN_INVALID_ARGUMENT,
         "data is NULL");
  EXPECT(cachegen_llama_unpack(bad, sizeof bad, model, NULL, &back_size), CACHEGEN_INVALID_ARGUMENT,
         "out is NULL");
  EXPECT(cachegen_llama_unpack(bad, sizeof bad, model, &back, NULL), CACHEGEN_INVALID_ARGUMENT,
         "out_size is NULL");
  EXPECT(cachegen_llama_unpack(bad, sizeof bad, model, &back, &back_size), CACHEGEN_CORRUPT_INPUT,
         "magic");
  CHECK(back == NULL && back_size == 0);
  free(state);

  llama_free(ctx);
  llama_model_free(lm);
  llama_backend_free();
  cachegen_llama_model_free(other);
  cachegen_llama_model_free(model);
  printf("capi_llama_consumer: %d checks passed\n", g_checks);
  return 0;
}
