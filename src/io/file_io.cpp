// Whole-file reads and atomic whole-file writes.
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>

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

void pwrite_all(int fd, uint64_t offset, std::span<const uint8_t> bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      io_fail("cannot write", path, errno);
    }
    done += static_cast<size_t>(n);
  }
}

// An unnamed read-write file in $TMPDIR (default /tmp): gone when closed.
int open_spill_file() {
  const char* env = std::getenv("TMPDIR");
  const std::string dir = env && *env ? env : "/tmp";
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  std::string name = dir + "/cachegen-spill.XXXXXX";  // file systems without O_TMPFILE
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) io_fail("cannot create a spill file in", dir, errno);
  ::unlink(name.c_str());
  return fd;
}

// Where a write to `path` goes: "-" is standard output; links are followed to their final
// target; a directory is refused.
struct Target {
  std::string path;
  bool exists = false, regular = false;
};

Target resolve_target(const std::string& path) {
  Target t;
  t.path = resolve_links(path);
  struct stat st {};
  if (::stat(t.path.c_str(), &st) != 0) {
    if (errno != ENOENT) io_fail("cannot stat", t.path, errno);
    return t;  // a new file
  }
  if (S_ISDIR(st.st_mode)) {
    throw Error(ErrorCode::invalid_argument,
                "cannot write '" + path + "': it is a directory, not a file");
  }
  t.exists = true;
  t.regular = S_ISREG(st.st_mode);
  return t;
}

void sync_parent_directory(const std::string& path) {
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
    detail::read_exact(fd, 0, out, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return out;
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  if (path == "-") {
    write_all(STDOUT_FILENO, bytes, "standard output");
    return;
  }
  const Target t = resolve_target(path);
  if (t.exists && !t.regular) {
    write_through(t.path, bytes);  // a device or FIFO is written, never replaced
    return;
  }
  OutputFile out(t.path);
  out.write_at(0, bytes);
  out.commit();
}

OutputFile::OutputFile(const std::string& path) {
  if (path == "-") {
    path_ = "standard output";
    mode_ = Mode::spill;
    fd_ = open_spill_file();
    target_fd_ = STDOUT_FILENO;
    return;
  }
  const Target t = resolve_target(path);
  path_ = t.path;
  if (t.exists && !t.regular) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) io_fail("cannot open", path_, errno);
    if (::lseek(fd_, 0, SEEK_CUR) >= 0) {
      mode_ = Mode::device;
      return;
    }
    // A FIFO, socket or terminal: in order only. Kept open (a FIFO's reader would see its
    // end if it were closed) and written from the spill file on commit.
    target_fd_ = std::exchange(fd_, open_spill_file());
    mode_ = Mode::spill;
    return;
  }
  std::random_device rd;
  tmp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd());
  // An unnamed file in the target's directory: a writer killed before commit leaves nothing
  // behind. Named only at commit (linked through /proc, then renamed over the target).
  const size_t slash = path_.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
  if (::access("/proc/self/fd", X_OK) == 0) {
    fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      unnamed_ = true;
      return;
    }
  }
  // File systems without O_TMPFILE: a named temp file, removed unless a kill intervenes.
  fd_ = ::open(tmp_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) io_fail("cannot create", tmp_, errno);
}

OutputFile::~OutputFile() {
  if (done_) return;
  if (fd_ >= 0) ::close(fd_);
  if (target_fd_ > STDERR_FILENO) ::close(target_fd_);
  if (!tmp_.empty() && !unnamed_) ::unlink(tmp_.c_str());
}

void OutputFile::write_at(uint64_t offset, std::span<const uint8_t> bytes) {
  if (done_) throw Error(ErrorCode::invalid_argument, "OutputFile: write after commit");
  pwrite_all(fd_, offset, bytes, path_);
  size_ = std::max<uint64_t>(size_, offset + bytes.size());
#ifdef SYNC_FILE_RANGE_WRITE
  // The bytes start on their way to the disk now, while the caller makes the next ones, rather
  // than all at commit's fsync (a hint: errors are fsync's to report). A 128 MiB decode's wall
  // time fell by a fifth (docs/PERFORMANCE.md, "At scale").
  if (mode_ == Mode::replace && !bytes.empty()) {
    ::sync_file_range(fd_, static_cast<off_t>(offset), static_cast<off_t>(bytes.size()),
                      SYNC_FILE_RANGE_WRITE);
  }
#endif
}

void OutputFile::commit() {
  if (done_) return;
  done_ = true;  // whatever happens below, the destructor has nothing left to do
  const int fd = std::exchange(fd_, -1);
  if (mode_ == Mode::replace) {
    if (::ftruncate(fd, static_cast<off_t>(size_)) != 0 || ::fsync(fd) != 0) {
      const int e = errno;
      ::close(fd);
      if (!unnamed_) ::unlink(tmp_.c_str());
      io_fail("cannot flush", tmp_, e);
    }
    if (unnamed_) {
      const std::string proc = "/proc/self/fd/" + std::to_string(fd);
      if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, tmp_.c_str(), AT_SYMLINK_FOLLOW) != 0) {
        const int e = errno;
        ::close(fd);
        io_fail("cannot name", tmp_, e);
      }
    }
    if (::close(fd) != 0) {
      const int e = errno;
      ::unlink(tmp_.c_str());
      io_fail("cannot close", tmp_, e);
    }
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const int e = errno;
      ::unlink(tmp_.c_str());
      io_fail("cannot rename into", path_, e);
    }
    sync_parent_directory(path_);  // make the rename itself durable
    return;
  }
  if (mode_ == Mode::device) {
    if (::close(fd) != 0) io_fail("cannot close", path_, errno);
    return;
  }
  // Spill: copied, in order, to the target (kept open since the constructor).
  const int out = std::exchange(target_fd_, -1);
  const bool owned = out > STDERR_FILENO;
  try {
    std::vector<uint8_t> buf(size_t{1} << 20);
    for (uint64_t at = 0; at < size_;) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), size_ - at));
      const ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        io_fail("cannot read the spill file for", path_, n < 0 ? errno : EIO);
      }
      write_all(out, std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)), path_);
      at += static_cast<uint64_t>(n);
    }
  } catch (...) {
    ::close(fd);
    if (owned) ::close(out);
    throw;
  }
  ::close(fd);
  if (owned && ::close(out) != 0) io_fail("cannot close", path_, errno);
}

}  // namespace cachegen
