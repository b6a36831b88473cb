#include "store/store_test_support.h"

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>

namespace cachegen::test {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/cachegen-store-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

namespace {
uint8_t pattern_byte(uint64_t seed, size_t i) {
  uint64_t x = seed ^ (i * 0x9E3779B97F4A7C15ull);
  x ^= x >> 29;
  return static_cast<uint8_t>(x ^ (x >> 8));
}
}  // namespace

std::vector<uint8_t> self_checking_value(uint64_t seed, size_t n_bytes) {
  std::vector<uint8_t> v(n_bytes);
  std::memcpy(v.data(), &seed, 8);
  const uint64_t n = n_bytes;
  std::memcpy(v.data() + 8, &n, 8);
  for (size_t i = 16; i < n_bytes; ++i) v[i] = pattern_byte(seed, i);
  return v;
}

bool is_whole_self_checking_value(const std::vector<uint8_t>& v) {
  if (v.size() < 16) return false;
  uint64_t seed, n;
  std::memcpy(&seed, v.data(), 8);
  std::memcpy(&n, v.data() + 8, 8);
  if (n != v.size()) return false;
  for (size_t i = 16; i < v.size(); ++i) {
    if (v[i] != pattern_byte(seed, i)) return false;
  }
  return true;
}

std::vector<uint8_t> random_bytes(size_t n_bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n_bytes);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

RedisStoreOptions test_redis_options() {
  RedisStoreOptions o;
  o.part_bytes = size_t{1} << 20;
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 5000;
  return o;
}

}  // namespace cachegen::test
