#include "kv_io.h"

#include <unistd.h>

#include <cstdio>
#include <optional>

#include "cachegen/store.h"

namespace cachegen::cli {

int exit_code_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument:
      return kExitUsage;
    case ErrorCode::not_found:
      return kExitNotFound;
    case ErrorCode::corrupt_input:
    case ErrorCode::truncated_input:
    case ErrorCode::unsupported_version:
      return kExitCorrupt;
    case ErrorCode::io_error:
    case ErrorCode::unavailable:
      return kExitIo;
    default:
      return kExitError;
  }
}

std::vector<uint8_t> load_input(const std::string& name, const std::string& store_url) {
  if (store_url.empty()) return read_file_bytes(name);
  return open_store(store_url, StoreOpen::existing)->get(name);
}

void save_output(const std::string& name, const std::string& store_url,
                 const std::vector<uint8_t>& bytes) {
  if (store_url.empty()) {
    write_file_atomic(name, bytes);
  } else {
    open_store(store_url)->put(name, bytes);
  }
}

uint64_t write_output_file(const std::string& name,
                           const std::function<uint64_t(const CgkvWriteAt&)>& write) {
  std::optional<OutputFile> file;
  const uint64_t size = write([&](uint64_t offset, std::span<const uint8_t> bytes) {
    if (!file) file.emplace(name);
    file->write_at(offset, bytes);
  });
  if (!file) file.emplace(name);  // an empty file
  file->commit();
  return size;
}

Progress::Progress(std::string label, size_t total)
    : label_(std::move(label)), total_(total), tty_(::isatty(STDERR_FILENO) == 1) {}

void Progress::update(size_t done) {
  if (!tty_ || total_ == 0) return;
  const int pct = static_cast<int>(100 * done / total_);
  if (pct == last_pct_) return;
  last_pct_ = pct;
  const int width = 30, fill = pct * width / 100;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%", label_.c_str(), fill,
               "##############################", width - fill, "", pct);
  std::fflush(stderr);
}

Progress::~Progress() {
  if (tty_ && last_pct_ >= 0) std::fprintf(stderr, "\n");
}

}  // namespace cachegen::cli
