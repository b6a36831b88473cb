// check_runtime_environment: a mistyped CACHEGEN_THREADS / CACHEGEN_SIMD is reported, not ignored.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cachegen/error.h"
#include "cachegen/runtime.h"

namespace cachegen {
namespace {

// Sets one variable for the scope, restoring the previous state after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

std::string problem() {
  try {
    check_runtime_environment();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    return e.what();
  }
  return {};
}

TEST(RuntimeEnvironment, BadValuesAreNamed) {
  for (const char* bad : {"abc", "0", "1025", "4x", " 4", "+4", "-1", "0x10"}) {
    ScopedEnv env("CACHEGEN_THREADS", bad);
    EXPECT_NE(problem().find("CACHEGEN_THREADS"), std::string::npos) << bad;
  }
  for (const char* bad : {"bogus", "AVX2", "sse"}) {
    ScopedEnv env("CACHEGEN_SIMD", bad);
    EXPECT_NE(problem().find("CACHEGEN_SIMD"), std::string::npos) << bad;
  }
}

TEST(RuntimeEnvironment, GoodValuesPass) {
  for (const char* good : {"1", "4", "1024", ""}) {
    ScopedEnv env("CACHEGEN_THREADS", good);
    EXPECT_EQ(problem(), "") << good;
  }
  for (const char* good : {"scalar", "avx2", "avx512", ""}) {
    ScopedEnv env("CACHEGEN_SIMD", good);
    EXPECT_EQ(problem(), "") << good;
  }
}

}  // namespace
}  // namespace cachegen
