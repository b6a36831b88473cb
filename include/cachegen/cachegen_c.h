/* cachegen: the C API, for other languages. Opaque handles, *_create / *_free pairs (free
 * accepts NULL), integer status codes equal to cachegen::ErrorCode (0 = CACHEGEN_OK), and no
 * exceptions across the boundary. cachegen_last_error() gives the message of the calling thread's
 * most recent call: the failure's message, or "" after a success. */
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

#ifdef __cplusplus
}
#endif

#endif /* CACHEGEN_C_H */
