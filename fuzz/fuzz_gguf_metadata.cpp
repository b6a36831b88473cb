// libFuzzer target: the bounded GGUF metadata reader (ModelShape::from_gguf and
// gguf_metadata_hash, src/cache/gguf_metadata.cpp). Both take a path, so each input goes through
// one temp file per process (the reader streams a file; a bytes entry point would be a second
// code path, not the one models are read through). Any input must give a valid shape or throw
// cachegen::Error. Seeds: fuzz/corpus/fuzz_gguf_metadata (fuzz/make_seeds.py).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cachegen/error.h"
#include "cachegen/kv_cache.h"

namespace {

const std::string& temp_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string p = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") +
                    "/cachegen_fuzz_gguf." + std::to_string(getpid()) + ".gguf";
    std::atexit([] { std::remove(temp_path().c_str()); });
    return p;
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = temp_path();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  if (std::fclose(f) != 0) std::abort();
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
