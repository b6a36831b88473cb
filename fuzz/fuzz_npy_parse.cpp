// libFuzzer target: the .npy parser (the CLI reads .npy from files and stores). Any byte string
// must parse or throw cachegen::Error. Seeds: fuzz/corpus/fuzz_npy_parse.
#include <cstddef>
#include <cstdint>
#include <span>

#include "cachegen/error.h"
#include "cachegen/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const cachegen::NpyArray a = cachegen::parse_npy(std::span<const uint8_t>(data, size));
    (void)cachegen::serialize_npy(a);  // a parsed array always serialises
  } catch (const cachegen::Error&) {
  }
  return 0;
}
