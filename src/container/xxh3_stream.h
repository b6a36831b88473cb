// Internal: XXH3-64 (seed 0) over bytes given in pieces, for the chunk checksums of version-5
// .cgkv files (docs/FORMAT.md). xxhash is compiled inline once per SIMD target (its AVX2
// accumulator hashes ~2.3x as fast as the shared library's SSE2 build here, ~2.8x XXH64);
// every target gives the same digest.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cachegen::detail {

// Room for xxhash's XXH3_state_t (576 bytes, 64-aligned; checked where it is used).
struct alignas(64) Xxh3State {
  unsigned char bytes[640];
};

struct Xxh3Kernels {
  void (*reset)(Xxh3State& s) noexcept;
  void (*update)(Xxh3State& s, const uint8_t* bytes, size_t n) noexcept;
  uint64_t (*digest)(const Xxh3State& s) noexcept;
};

const Xxh3Kernels& xxh3_kernels_scalar();
const Xxh3Kernels& xxh3_kernels_avx2();
// The running CPU's (simd_path(): the AVX-512 path uses the AVX2 kernels).
const Xxh3Kernels& xxh3_kernels();

}  // namespace cachegen::detail
