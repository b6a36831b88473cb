/* Uses the installed C API; exits non-zero on any mismatch. */
#include <cachegen/cachegen_c.h>
#include <stdio.h>

int main(void) {
  float x[64 * 4];
  for (int i = 0; i < 64 * 4; ++i) x[i] = (float)(i % 13) * 0.25f;
  cachegen_code_stream* s = NULL;
  if (cachegen_quantize_f32(x, 64, 4, 4, 32, &s) != CACHEGEN_OK) {
    fprintf(stderr, "quantize failed: %s\n", cachegen_last_error());
    return 1;
  }
  size_t fixed = 0;
  int rc = cachegen_fixed_width_bytes(s, &fixed);
  cachegen_code_stream_free(s);
  if (rc != CACHEGEN_OK || fixed != 64 * 4 * 4 / 8 + 2 * 4 * 4) return 1;
  printf("consumer: cachegen %s ok (fixed=%zu)\n", cachegen_version(), fixed);
  return 0;
}
