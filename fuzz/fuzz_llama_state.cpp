// libFuzzer target: llama.cpp state bytes (src/llama/state_format.cpp, state_file.cpp) without
// llama.cpp itself (only ggml's type traits, from ggml-base). The first byte picks the entry
// point (low two bits: 0 parse_seq_state, 1 parse_context_state, 2 or 3 parse_state_file; bit 2:
// cells carry llama_kv_cell_ext); the rest is the input. Accepted input must rebuild to the same
// bytes (build_state / build_state_file promise this for an unchanged snapshot). Seeds:
// fuzz/corpus/fuzz_llama_state (fuzz/make_llama_seeds.cpp).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "cachegen/error.h"
#include "cachegen/llama.h"

namespace llama = cachegen::llama;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const uint8_t> bytes(data + 1, size - 1);
  llama::ParseOptions options;
  options.cell_ext = (data[0] & 4) != 0;
  // Bound allocation by the input, as a caller reading an untrusted file would.
  options.max_cells = 1 << 16;
  options.max_tokens = 1 << 16;
  try {
    std::vector<uint8_t> rebuilt;
    switch (data[0] & 3) {
      case 0:
        rebuilt = llama::build_state(llama::parse_seq_state(bytes, options));
        break;
      case 1:
        rebuilt = llama::build_state(llama::parse_context_state(bytes, options));
        break;
      default:
        rebuilt = llama::build_state_file(llama::parse_state_file(bytes, options));
        break;
    }
    if (rebuilt.size() != bytes.size() ||
        !std::equal(rebuilt.begin(), rebuilt.end(), bytes.begin())) {
      std::abort();  // parsed, yet does not round-trip
    }
  } catch (const cachegen::Error&) {
  }
  return 0;
}
