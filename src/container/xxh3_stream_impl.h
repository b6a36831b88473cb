// Internal: the XXH3 stream kernels' bodies, included by one .cpp per SIMD target (compiled
// with that target's flags; xxhash picks its accumulator from them) inside a distinct
// namespace.
#pragma once

#define XXH_INLINE_ALL  // static copies in this file: each target keeps its own
#include <xxhash.h>

#include "container/xxh3_stream.h"

namespace cachegen::detail::CACHEGEN_KERNEL_NS {

static_assert(sizeof(XXH3_state_t) <= sizeof(Xxh3State) &&
              alignof(XXH3_state_t) <= alignof(Xxh3State));

static void reset(Xxh3State& s) noexcept {
  XXH3_64bits_reset(reinterpret_cast<XXH3_state_t*>(s.bytes));
}
static void update(Xxh3State& s, const uint8_t* bytes, size_t n) noexcept {
  XXH3_64bits_update(reinterpret_cast<XXH3_state_t*>(s.bytes), bytes, n);
}
static uint64_t digest(const Xxh3State& s) noexcept {
  return XXH3_64bits_digest(reinterpret_cast<const XXH3_state_t*>(s.bytes));
}

// Internal linkage, as quant/kernels_impl.h's kTable.
static constexpr Xxh3Kernels kXxh3Table = {reset, update, digest};

}  // namespace cachegen::detail::CACHEGEN_KERNEL_NS
