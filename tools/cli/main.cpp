// cachegen: command-line tool. Exit codes (exit_code_for): 0 ok, 1 other error, 2 bad
// arguments, 3 not found, 4 corrupt/truncated/unsupported input, 5 I/O or server failure; the
// message on stderr names what was wrong.
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cachegen/error.h"
#include "cachegen/npy.h"
#include "cachegen/runtime.h"
#include "commands.h"
#include "kv_io.h"
#ifdef CACHEGEN_WITH_LLAMA
#include "llama_commands.h"
#endif

namespace cachegen::cli {

std::string find_data_file(const std::string& explicit_dir, const std::string& relative) {
  std::vector<std::string> dirs;
  if (!explicit_dir.empty()) {
    dirs.push_back(explicit_dir);  // an explicit directory is the only place looked at
  } else {
    if (const char* env = std::getenv("CACHEGEN_DATA_DIR")) dirs.push_back(env);
    dirs.push_back(CACHEGEN_INSTALL_DATA_DIR);
    dirs.push_back(CACHEGEN_SOURCE_DATA_DIR);
  }
  for (const std::string& d : dirs) {
    const std::filesystem::path p = std::filesystem::path(d) / relative;
    if (std::filesystem::exists(p)) return p.string();
  }
  std::string tried;
  for (const std::string& d : dirs) tried += "\n  " + d;
  throw Error(ErrorCode::not_found, "data file '" + relative + "' not found; looked in:" + tried +
                                        "\n(set --data DIR or CACHEGEN_DATA_DIR)");
}

}  // namespace cachegen::cli

int main(int argc, char** argv) {
  // Buffers of up to 64 MiB (a chunk's tensors, planes and windows) come from the heap and are
  // reused after they are freed, instead of fresh mappings whose every page faults again (glibc
  // maps blocks over 128 KiB by default): half the time of `encode --lossless` of a 128 MB
  // array went to page faults.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  // Input files are mapped (encode's .npy, the .cgkv files read): their truncation by another
  // process meanwhile is an I/O failure.
  cachegen::exit_on_truncated_input(5);
  CLI::App app{"cachegen: compress the KV caches of large language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "cachegen 0.1.0");
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  cachegen::cli::add_bench_seed(*bench);
  cachegen::cli::add_bench_codec(*bench);
  cachegen::cli::add_bench_stream(*bench);
  cachegen::cli::add_kv_commands(app);
  cachegen::cli::add_store_commands(app);
#ifdef CACHEGEN_WITH_LLAMA
  cachegen::cli::add_llama_commands(app);
#endif
  app.footer(
      "Exit codes: 0 ok, 1 other error, 2 bad arguments, 3 file or key not found, "
      "4 corrupt/truncated/unsupported input, 5 I/O or server failure.");
  try {
    cachegen::check_runtime_environment();
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const cachegen::Error& e) {
    std::fprintf(stderr, "cachegen: error: %s\n", e.what());
    return cachegen::cli::exit_code_for(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cachegen: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
