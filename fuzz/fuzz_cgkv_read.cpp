// libFuzzer target: the .cgkv container reader. Any byte string must either decode or throw
// cachegen::Error; never crash, hang or allocate from an unchecked field. Seeds:
// fuzz/corpus/fuzz_cgkv_read (small quantized and lossless files).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cachegen/container.h"
#include "cachegen/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const cachegen::CgkvReader r =
        cachegen::CgkvReader::from_bytes(std::vector<uint8_t>(data, data + size));
    // Bound the work a forged header can ask for: decode at most 4096 tokens.
    const size_t n = r.info().n_tokens < 4096 ? r.info().n_tokens : 4096;
    (void)r.read_tokens(0, n);
    for (size_t b = 0; b < r.info().blobs.size(); ++b) (void)r.read_blob_at(b);
    if (!r.info().chunks.empty()) (void)r.chunk_tensor_bytes(r.info().chunks.size() - 1);
  } catch (const cachegen::Error&) {
  }
  return 0;
}
