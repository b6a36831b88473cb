#include "cachegen/error.h"

namespace cachegen {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::ok:
      return "ok";
    case ErrorCode::invalid_argument:
      return "invalid_argument";
    case ErrorCode::corrupt_input:
      return "corrupt_input";
    case ErrorCode::truncated_input:
      return "truncated_input";
    case ErrorCode::output_too_small:
      return "output_too_small";
    case ErrorCode::unsupported_version:
      return "unsupported_version";
    case ErrorCode::io_error:
      return "io_error";
    case ErrorCode::out_of_memory:
      return "out_of_memory";
    case ErrorCode::not_found:
      return "not_found";
    case ErrorCode::unavailable:
      return "unavailable";
  }
  return "unknown_error";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(std::string(error_code_name(code)) + ": " + message),
      code_(code),
      message_(message) {}

}  // namespace cachegen
