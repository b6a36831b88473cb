// The cachegen CLI's subcommands. Each registers itself on the CLI11 app and runs through
// the public API only.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace cachegen::cli {

// `cachegen bench seed`: the reference's synthetic benchmark.
void add_bench_seed(CLI::App& bench);

// `cachegen bench codec`: codec speed and size next to zstd and memcpy.
void add_bench_codec(CLI::App& bench);

// `cachegen bench stream`: context loading from a real redis-server over a shaped link.
void add_bench_stream(CLI::App& bench);

// `cachegen encode | decode | inspect | verify`.
void add_kv_commands(CLI::App& app);
// --profile, --bits-per-element, --max-kl (transform files): encode and llama pack.
void add_profile_options(CLI::App* cmd, std::string& profile, double& bits_per_element,
                         double& max_kl);
// `cachegen store put | get | list | rm`.
void add_store_commands(CLI::App& app);

// Where the CLI finds its data (the seed benchmark inputs): --data, $CACHEGEN_DATA_DIR, the
// installed share/cachegen, then the source tree's tests/data.
std::string find_data_file(const std::string& explicit_dir, const std::string& relative);

}  // namespace cachegen::cli
