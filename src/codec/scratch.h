// Per-thread scratch buffers of the codec.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cachegen::detail {

// Thread-local scratch that keeps its pages between calls: fresh large vectors page-fault on
// every call (a 4 KiB fault costs microseconds here; faults were 60% of a 1-thread encode of
// 8 M values). One buffer per slot, owned by its caller until it returns; slots exist so
// that nested users (a batch encoder and the rANS coder it calls) do not share one.
enum class Scratch { codes, delta, symbols, symbols_pair, rans_words, rans_words_pair, count };
uint8_t* scratch_bytes(size_t n, Scratch slot = Scratch::codes);

}  // namespace cachegen::detail
