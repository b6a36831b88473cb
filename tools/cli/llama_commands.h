// `cachegen eval` and `cachegen llama ...`: the llama.cpp integration commands. Built only
// with CACHEGEN_WITH_LLAMA=ON (they link cachegen_llama).
#pragma once

#include <CLI/CLI.hpp>

namespace cachegen::cli {

// Registers `eval` and `llama` (with `inspect`, `pack`, `unpack` and `demo`) on the top-level
// app.
void add_llama_commands(CLI::App& app);

}  // namespace cachegen::cli
