#include "codec/scratch.h"

#include <vector>

namespace cachegen::detail {

uint8_t* scratch_bytes(size_t n, Scratch slot) {
  thread_local std::vector<uint8_t> buffers[static_cast<size_t>(Scratch::count)];
  std::vector<uint8_t>& buffer = buffers[static_cast<size_t>(slot)];
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace cachegen::detail
