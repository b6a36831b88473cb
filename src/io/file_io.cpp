// Whole-file reads and atomic whole-file writes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "cachegen/error.h"
#include "cachegen/npy.h"

namespace cachegen {
namespace {

[[noreturn]] void io_fail(const std::string& what, const std::string& path, int err) {
  throw Error(err == ENOENT ? ErrorCode::not_found : ErrorCode::io_error,
              what + " '" + path + "': " + std::strerror(err));
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_fail("cannot open", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    io_fail("cannot stat", path, e);
  }
  std::vector<uint8_t> out;
  if (S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(st.st_size));
  uint8_t buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      io_fail("cannot read", path, e);
    }
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  std::random_device rd;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) io_fail("cannot create", tmp, errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      io_fail("cannot write", tmp, e);
    }
    done += static_cast<size_t>(n);
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

}  // namespace cachegen
