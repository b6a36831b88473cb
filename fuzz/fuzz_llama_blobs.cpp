// libFuzzer target: the llama-specific .cgkv blobs (src/llama/cgkv_blobs.cpp): app_state
// ("CGLS") and metadata_json, decoded as a .cgkv reader meets them. The first byte picks the
// decoder (even: app_state, odd: metadata_json); the rest is the blob. A decoded blob must
// encode again and decode to the same thing. Seeds: fuzz/corpus/fuzz_llama_blobs
// (fuzz/make_llama_seeds.cpp).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "llama/cgkv_blobs.h"

namespace llama = cachegen::llama;
namespace detail = cachegen::llama::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const uint8_t> bytes(data + 1, size - 1);
  llama::ParseOptions limits;
  limits.max_cells = 1 << 16;
  try {
    if (data[0] % 2 == 0) {
      const llama::KvSnapshot s = detail::decode_app_state(bytes, limits);
      const std::vector<uint8_t> again = detail::encode_app_state(s);
      const llama::KvSnapshot t = detail::decode_app_state(again, limits);
      if (detail::encode_app_state(t) != again) std::abort();  // not a fixed point
    } else {
      const llama::ModelIdentity id = detail::decode_metadata(bytes);
      if (detail::decode_metadata(detail::encode_metadata(id, llama::KvSnapshot{})) != id) {
        std::abort();
      }
    }
  } catch (const cachegen::Error&) {
  }
  return 0;
}
