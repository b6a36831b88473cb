// CLI helpers: .npy KV arrays, reading/writing files or store values, exit codes, progress.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cachegen/container.h"
#include "cachegen/error.h"
#include "cachegen/npy.h"

namespace cachegen::cli {

// Exit codes a shell user can act on (listed in `cachegen --help`).
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,     // any other failure
  kExitUsage = 2,     // bad arguments or option values
  kExitNotFound = 3,  // a file or key does not exist
  kExitCorrupt = 4,   // input is corrupt, truncated or of an unsupported version
  kExitIo = 5,        // the OS or a server failed (disk, network, Redis down)
};
int exit_code_for(ErrorCode code);

// Reads bytes from a local file, or from a store when store_url is set (then `name` is the key).
std::vector<uint8_t> load_input(const std::string& name, const std::string& store_url);
// Writes atomically to a file, or puts into a store under key `name`.
void save_output(const std::string& name, const std::string& store_url,
                 const std::vector<uint8_t>& bytes);
// Streams a file written piece by piece into `name`, atomically as save_output: `write` is given
// where its pieces go and returns the file's size. The output is opened at the first piece, so
// a write that fails before it touches nothing (a device or FIFO target included).
uint64_t write_output_file(const std::string& name,
                           const std::function<uint64_t(const CgkvWriteAt&)>& write);

// A one-line progress bar on stderr, drawn only when stderr is a terminal.
class Progress {
 public:
  Progress(std::string label, size_t total);
  void update(size_t done);
  ~Progress();

 private:
  std::string label_;
  size_t total_;
  bool tty_;
  int last_pct_ = -1;
};

}  // namespace cachegen::cli
