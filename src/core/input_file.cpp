#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "cachegen/error.h"

namespace cachegen::detail {

int open_regular_input(const std::string& path, uint64_t& size_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    throw Error(e == ENOENT ? ErrorCode::not_found : ErrorCode::io_error,
                "cannot open '" + path + "': " + std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(ErrorCode::io_error, "cannot stat '" + path + "': " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* what = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                                              : "not a regular file";
    throw Error(ErrorCode::invalid_argument,
                "'" + path + "' is " + what + "; inputs must be regular files");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  size_bytes = static_cast<uint64_t>(st.st_size);
  return fd;
}

void read_exact(int fd, uint64_t offset, std::span<uint8_t> out, const std::string& path) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      throw Error(ErrorCode::io_error, "cannot read '" + path + "': " + std::strerror(e));
    }
    if (n == 0) {
      throw Error(ErrorCode::io_error, "'" + path + "' shrank while being read (" +
                                           std::to_string(offset + done) + " of " +
                                           std::to_string(offset + out.size()) + " bytes)");
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace cachegen::detail
