#include "capi/capi_status.h"

#include <cstdlib>

#include "cachegen/cachegen_c.h"

namespace cachegen::capi {
namespace {
thread_local std::string t_last_error;
}
void set_last_error(const char* message) noexcept {
  try {
    t_last_error = message;
  } catch (...) {  // no memory for the message itself: leave it empty rather than terminate
    t_last_error.clear();
  }
}
const char* last_error() {
  return t_last_error.c_str();
}
}  // namespace cachegen::capi

extern "C" {

const char* cachegen_status_name(int status) {
  if (status < 0 || status > static_cast<int>(cachegen::ErrorCode::unavailable)) {
    return "unknown_status";
  }
  return cachegen::error_code_name(static_cast<cachegen::ErrorCode>(status));
}

const char* cachegen_last_error(void) {
  return cachegen::capi::last_error();
}

void cachegen_free(void* buffer) {
  std::free(buffer);
}

const char* cachegen_version(void) {
  return CACHEGEN_VERSION_STRING;
}

}  // extern "C"
