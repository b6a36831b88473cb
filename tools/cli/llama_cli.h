// Pieces shared by the llama.cpp commands (llama_commands.cpp, llama_demo.cpp): model and file
// lookup, and the --level / --bits / --lossless options.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cachegen/llama.h"
#include "cachegen/npy.h"  // read_file_bytes, write_file_atomic
#include "cachegen/transform.h"

namespace cachegen::cli {

// --model, else $CACHEGEN_MODEL, else ../shared/models/stories260K.gguf from the working dir.
std::string resolve_model(const std::string& given);
// K+V elements of a snapshot's data stream.
size_t kv_elements(const llama::KvSnapshot& s);

struct LevelArgs {
  std::string level = "high";  // lossless | high | medium | low (unless --bits / --lossless)
  bool lossless = false;
  int bits = 6;
  CLI::Option* bits_opt = nullptr;
  size_t group_size = 32;
  size_t chunk_tokens = 0;                  // 0: the level's default
  std::string profile;                      // calibration profile: transform files (needs --model)
  double bits_per_element = 0, max_kl = 0;  // with a profile: the rate instead of the level's
};

bool uses_bits(const LevelArgs& a);
std::string level_name(const LevelArgs& a);
// The library's pack options of --lossless / --bits / --level / --group-size / --chunk-tokens.
llama::PackOptions pack_options(const LevelArgs& a);
// The level they choose: llama::pack_encoding (the same choice as the C API's and Python's).
llama::SnapshotEncoding make_encoding(const LevelArgs& a, const llama::Model* model,
                                      size_t n_layers);
void add_level_options(CLI::App* cmd, LevelArgs& a);

// Milliseconds since t0 (steady clock).
double ms_since(std::chrono::steady_clock::time_point t0);
// The most likely token of a row of logits (greedy decoding).
int32_t argmax_token(std::span<const float> logits);
// Greedy generation: {first, then n tokens}, decoding `first` at position `pos` onwards.
std::vector<int32_t> generate(llama::Context& ctx, int32_t first, int32_t pos, int n);

// `cachegen llama demo`.
void add_demo(CLI::App& llama_cmd);
// `cachegen llama run`.
void add_run(CLI::App& llama_cmd);

}  // namespace cachegen::cli
