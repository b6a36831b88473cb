/* The C consumers' checks (capi_consumer.c, tests/capi/capi_llama_consumer.c): CHECK(cond),
 * and EXPECT(call, status, text) / OK(call) on a C API status and its cachegen_last_error()
 * text. Each exits non-zero on the first mismatch, naming it; g_checks counts them. */
#ifndef CACHEGEN_CAPI_CHECK_H
#define CACHEGEN_CAPI_CHECK_H

#include <cachegen/cachegen_c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_checks = 0;

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    ++g_checks;                                                                                  \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "%s:%d: check failed: %s (last error: '%s')\n", __FILE__, __LINE__, #cond, \
              cachegen_last_error());                                                            \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

/* rc is `want` and the last error mentions `text` ("" after a success). */
static void expect(int rc, int want, const char* text, int line) {
  ++g_checks;
  if (rc != want || (want == CACHEGEN_OK && cachegen_last_error()[0] != '\0') ||
      (want != CACHEGEN_OK && strstr(cachegen_last_error(), text) == NULL)) {
    fprintf(stderr, "line %d: got %s ('%s'), want %s mentioning '%s'\n", line,
            cachegen_status_name(rc), cachegen_last_error(), cachegen_status_name(want), text);
    exit(1);
  }
}
#define EXPECT(call, want, text) expect((call), (want), (text), __LINE__)
#define OK(call) expect((call), CACHEGEN_OK, "", __LINE__)

#endif /* CACHEGEN_CAPI_CHECK_H */
