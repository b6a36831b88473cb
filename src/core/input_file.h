// Internal: opening input files. Inputs must be regular files: a directory, a device
// (/dev/zero would be read until memory runs out), a FIFO (open() would block for a writer) or a
// socket is refused with Error(invalid_argument) naming the path, exit code 2 in the CLI.
#pragma once

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

}  // namespace cachegen::detail
