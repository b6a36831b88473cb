// Helpers shared by the store tests: temp directories, self-checking values, store factories.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cachegen/store.h"

namespace cachegen::test {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// `n_bytes` (>= 16) bytes whose first 16 bytes hold (seed, n_bytes) and whose rest follows from
// them, so that any whole value can be checked on its own and a torn mix of two cannot pass.
std::vector<uint8_t> self_checking_value(uint64_t seed, size_t n_bytes);
bool is_whole_self_checking_value(const std::vector<uint8_t>& value);

std::vector<uint8_t> random_bytes(size_t n_bytes, uint64_t seed);

// RedisStore options used by the tests: 1 MiB parts (so 10 MiB spans many), short timeouts.
RedisStoreOptions test_redis_options();

}  // namespace cachegen::test
