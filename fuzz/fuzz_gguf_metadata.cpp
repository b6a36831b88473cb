// libFuzzer target: the bounded GGUF metadata reader (ModelShape::from_gguf and
// gguf_metadata_hash, src/cache/gguf_metadata.cpp). Both take a path, so each input goes through
// an in-memory file (memfd, opened by its /proc/self/fd path; a bytes entry point would be a
// second code path, not the one models are read through, and a disk file rewritten per input
// ran at ~240 inputs/s on ext4). Any input must give a valid shape or throw cachegen::Error.
// Seeds: fuzz/corpus/fuzz_gguf_metadata (fuzz/make_gguf_seeds.py).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cachegen/error.h"
#include "cachegen/kv_cache.h"

namespace {

// The memfd holding the current input; its path opens a fresh description (offset 0).
int input_fd() {
  static const int fd = memfd_create("cachegen_fuzz_gguf", 0);
  if (fd < 0) std::abort();
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = input_fd();
  if (ftruncate(fd, 0) != 0) std::abort();
  for (size_t done = 0; done < size;) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    const cachegen::ModelShape shape = cachegen::ModelShape::from_gguf(path);
    // from_gguf promises a validated shape.
    if (shape.n_layers < 1 || shape.n_kv_heads < 1 || shape.head_dim < 1) std::abort();
    if (!shape.attention.empty() && shape.attention.size() != size_t(shape.n_layers)) std::abort();
  } catch (const cachegen::Error&) {
  }
  try {
    (void)cachegen::gguf_metadata_hash(path);
  } catch (const cachegen::Error&) {
  }
  return 0;
}
