// Internal: exception-to-status translation for the C API.
#pragma once

#include <new>
#include <string>

#include "cachegen/error.h"

namespace cachegen::capi {

void set_last_error(const char* message) noexcept;
const char* last_error();

// Runs fn, mapping exceptions to status codes and recording their message.
template <typename Fn>
int guard(Fn&& fn) noexcept {
  try {
    fn();
    set_last_error("");
    return 0;
  } catch (const Error& e) {
    set_last_error(e.what());  // takes a const char*: no allocation outside its own try
    return static_cast<int>(e.code());
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return static_cast<int>(ErrorCode::out_of_memory);
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return static_cast<int>(ErrorCode::invalid_argument);
  } catch (...) {
    set_last_error("unknown error");
    return static_cast<int>(ErrorCode::invalid_argument);
  }
}

}  // namespace cachegen::capi
