// Random 64-bit ids for temp file names and Redis generations.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <random>

namespace cachegen::store_detail {

// 64 random bits from a per-thread generator seeded by std::random_device. The generator is
// reseeded when the pid changes, so a fork()ed child never repeats its parent's ids.
// Not for cryptographic use.
inline uint64_t random_u64() {
  thread_local std::mt19937_64 rng;
  thread_local pid_t seeded_pid = -1;
  if (seeded_pid != ::getpid()) {
    seeded_pid = ::getpid();
    std::random_device rd;
    rng.seed((uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(seeded_pid));
  }
  return rng();
}

}  // namespace cachegen::store_detail
