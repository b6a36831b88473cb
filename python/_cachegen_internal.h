// Internal to the native module: buffer helpers shared by _cachegen.cpp and the llama.cpp part
// (_cachegen_llama.cpp, built with CACHEGEN_WITH_LLAMA only).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>

namespace cachegen::python {

// A read-only C-contiguous view of a buffer-protocol object (numpy array, bytes, memoryview...).
pybind11::buffer_info contiguous(const pybind11::buffer& b, const char* what);
std::span<const uint8_t> bytes_of(const pybind11::buffer_info& info);

// Adds LlamaModel, llama_pack and llama_unpack to the module.
void bind_llama(pybind11::module_& m);

}  // namespace cachegen::python
