// cachegen: the one error vocabulary shared by every layer.
//
// C++ entry points report failure by throwing cachegen::Error; the C API (cachegen_c.h)
// returns the same codes as integers. Codes are frozen: new ones are only ever appended.
#pragma once

#include <stdexcept>
#include <string>

namespace cachegen {

enum class ErrorCode : int {
  ok = 0,
  invalid_argument = 1,  // a caller-supplied value is out of its documented range
  corrupt_input = 2,     // encoded bytes are malformed (bad magic, impossible field, bad checksum)
  truncated_input = 3,   // encoded bytes end before the structure they describe
  output_too_small = 4,  // a caller-supplied output buffer cannot hold the result
  unsupported_version = 5,  // a well-formed stream of a format version this build does not read
  io_error = 6,             // the operating system or a server failed a read or write
  out_of_memory = 7,        // an allocation failed
  not_found = 8,            // a key or file does not exist
  unavailable = 9,          // a service (e.g. Redis) cannot be reached
};

// Stable lower-case name of a code, e.g. "corrupt_input".
const char* error_code_name(ErrorCode code) noexcept;

// The exception every cachegen C++ function throws. what() is "<code name>: <message>"; the
// message names the argument, field, offset or limit that was wrong.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }
  // The message without the code name (to add context and rethrow without repeating it).
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

}  // namespace cachegen
