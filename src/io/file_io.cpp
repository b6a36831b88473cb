// Whole-file reads and atomic whole-file writes.
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "cachegen/error.h"
#include "cachegen/npy.h"
#include "core/input_file.h"

namespace cachegen {
namespace {

[[noreturn]] void io_fail(const std::string& what, const std::string& path, int err) {
  throw Error(err == ENOENT ? ErrorCode::not_found : ErrorCode::io_error,
              what + " '" + path + "': " + std::strerror(err));
}

void write_all(int fd, std::span<const uint8_t> bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      io_fail("cannot write", path, errno);
    }
    done += static_cast<size_t>(n);
  }
}

// Follows a chain of symbolic links from `path` to the name that is not a link (which may not
// exist yet: a dangling link's target is created). Relative targets resolve against the
// link's directory.
std::string resolve_links(std::string path) {
  for (int hops = 0;; ++hops) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return path;
    if (hops == 40) io_fail("cannot resolve", path, ELOOP);
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
    if (n < 0) io_fail("cannot read link", path, errno);
    std::string target(buf, static_cast<size_t>(n));
    if (target.empty() || target[0] != '/') {
      const size_t slash = path.find_last_of('/');
      if (slash != std::string::npos) target = path.substr(0, slash + 1) + target;
    }
    path = std::move(target);
  }
}

// Writes into an existing non-regular file (device, FIFO, socket) as a shell redirect would.
void write_through(const std::string& path, std::span<const uint8_t> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) io_fail("cannot open", path, errno);
  try {
    write_all(fd, bytes, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) io_fail("cannot close", path, errno);
}

void replace_atomically(const std::string& path, std::span<const uint8_t> bytes) {
  std::random_device rd;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) io_fail("cannot create", tmp, errno);
  try {
    write_all(fd, bytes, tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  const int sync_rc = ::fsync(fd);
  const int sync_errno = errno;
  if (::close(fd) != 0 || sync_rc != 0) {  // close even when fsync failed: no leaked descriptor
    const int e = sync_rc != 0 ? sync_errno : errno;
    ::unlink(tmp.c_str());
    io_fail("cannot flush", tmp, e);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    io_fail("cannot rename into", path, e);
  }
  // Make the rename itself durable.
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  uint64_t size = 0;
  const int fd = detail::open_regular_input(path, size);
  // Read exactly the size fstat reported: bounded, and a file changing under us is an error
  // rather than a silently different result.
  std::vector<uint8_t> out;
  try {
    out.resize(static_cast<size_t>(size));
  } catch (...) {
    ::close(fd);
    throw;
  }
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      if (n < 0) io_fail("cannot read", path, e);
      throw Error(ErrorCode::io_error, "'" + path + "' shrank while being read (" +
                                           std::to_string(done) + " of " + std::to_string(size) +
                                           " bytes)");
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  if (path == "-") {
    write_all(STDOUT_FILENO, bytes, "standard output");
    return;
  }
  const std::string target = resolve_links(path);
  struct stat st {};
  if (::stat(target.c_str(), &st) != 0) {
    if (errno != ENOENT) io_fail("cannot stat", target, errno);
    replace_atomically(target, bytes);  // a new file
    return;
  }
  if (S_ISREG(st.st_mode)) {
    replace_atomically(target, bytes);
  } else if (S_ISDIR(st.st_mode)) {
    throw Error(ErrorCode::invalid_argument,
                "cannot write '" + path + "': it is a directory, not a file");
  } else {
    write_through(target, bytes);  // a device or FIFO is written, never replaced
  }
}

}  // namespace cachegen
