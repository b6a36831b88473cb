// Internal: opening input files. Inputs must be regular files: a directory, a device
// (/dev/zero would be read until memory runs out), a FIFO (open() would block for a writer) or a
// socket is refused with Error(invalid_argument) naming the path, exit code 2 in the CLI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace cachegen::detail {

// Opens `path` read-only without blocking (O_NONBLOCK, cleared again for a regular file) and
// returns the descriptor and the size fstat reports. Errors: not_found, io_error (the OS
// refused), invalid_argument (not a regular file).
int open_regular_input(const std::string& path, uint64_t& size_bytes);

// Reads exactly out.size() bytes at `offset` of fd (opened from `path`, named in errors):
// io_error when the OS fails or the file ends first (it shrank while being read).
void read_exact(int fd, uint64_t offset, std::span<uint8_t> out, const std::string& path);

// A regular file mapped read-only and shared with the OS's page cache: nothing copied, its pages
// mapped as they are first read (the OS reads ahead; mapping them all in the open call, or
// reading the file into fresh memory, kept both cores waiting: `cachegen encode` of a 128 MiB
// array 0.10 s, against 0.14 s reading it, 0.15 against 0.19 from a cold cache). An empty file
// maps nothing. While it lives, its range is listed for exit_on_truncated_mapping (up to
// kListedMappings at once; others are not guarded). Errors as open_regular_input, io_error
// where mmap fails.
class MappedFile {
 public:
  static constexpr int kListedMappings = 16;
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  MappedFile(MappedFile&& o) noexcept { swap(o); }
  MappedFile& operator=(MappedFile&& o) noexcept {
    MappedFile(std::move(o)).swap(*this);
    return *this;
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(p_), n_}; }

 private:
  void swap(MappedFile& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    std::swap(slot_, o.slot_);
  }
  void* p_ = nullptr;
  size_t n_ = 0;
  int slot_ = -1;  // its entry in the listed mappings, or -1
};

// From now on, a SIGBUS at an address inside a listed MappedFile (its file truncated by
// another process while mapped: the lost pages cannot be read) writes one line naming the file
// to stderr and ends the process with _exit(exit_code); any other SIGBUS keeps the default
// action. For applications (the CLI): the library never installs it itself.
void exit_on_truncated_mapping(int exit_code) noexcept;

}  // namespace cachegen::detail
