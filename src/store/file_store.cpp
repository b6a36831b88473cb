// FileStore: one file per key in a directory, replaced atomically by rename(2).
//
// Why this is safe for concurrent threads and processes: a value only becomes visible under its
// final name through rename(), which atomically swaps the directory entry; a reader that opened
// the old file keeps reading the old inode to its end. Temp names carry 64 random bits and are
// created with O_EXCL, so writers never share a temp file. A writer that crashes leaves only a
// ".tmp-*" file, which list() and get() never look at.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>

#include "cachegen/error.h"
#include "cachegen/store.h"
#include "store/random_id.h"
#include "store/store_key.h"

namespace cachegen {
namespace {

using store_detail::file_name_to_key;
using store_detail::key_to_file_name;
using store_detail::printable_key;

constexpr size_t kMaxFileNameBytes = 255;  // NAME_MAX on Linux file systems
constexpr size_t kIoChunkBytes = size_t{1} << 30;

[[noreturn]] void throw_errno(int err, const std::string& what, const std::string& path) {
  throw Error(ErrorCode::io_error,
              "FileStore: " + what + " '" + path + "' failed: " + std::strerror(err));
}

// Closes a descriptor on scope exit; errors from close() on read-only descriptors don't matter.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

std::string random_hex64() {
  static constexpr char kHex[] = "0123456789abcdef";
  uint64_t r = store_detail::random_u64();
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, r >>= 4) out[i] = kHex[r & 15];
  return out;
}

void write_all(int fd, std::span<const uint8_t> data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const size_t n = std::min(data.size() - done, kIoChunkBytes);
    const ssize_t w = ::write(fd, data.data() + done, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_errno(errno, "writing", path);
    }
    done += static_cast<size_t>(w);
  }
}

void fsync_dir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.fd < 0) throw_errno(errno, "opening directory", dir);
  if (::fsync(fd.fd) != 0) throw_errno(errno, "fsync of directory", dir);
}

class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}

  void put(std::string_view key, std::span<const uint8_t> value) override {
    const std::string path = path_for(key);
    const std::string tmp = dir_ + "/.tmp-" + random_hex64();
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.fd < 0) throw_errno(errno, "creating temp file", tmp);
    try {
      write_all(fd.fd, value, tmp);
      if (::fsync(fd.fd) != 0) throw_errno(errno, "fsync of", tmp);
      if (::close(fd.release()) != 0) throw_errno(errno, "closing", tmp);
      if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno(errno, "renaming to", path);
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
    fsync_dir(dir_);
  }

  std::optional<std::vector<uint8_t>> try_get(std::string_view key) override {
    const std::string path = path_for(key);
    // No following links (a link planted in the directory could expose any file the caller can
    // read) and no blocking on a FIFO; the S_ISREG check below refuses what is not a file.
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (fd.fd < 0) {
      if (errno == ENOENT) return std::nullopt;
      if (errno == ELOOP) {
        throw Error(ErrorCode::io_error,
                    "FileStore: '" + path + "' is a symbolic link; values are never links");
      }
      throw_errno(errno, "opening", path);
    }
    struct stat st {};
    if (::fstat(fd.fd, &st) != 0) throw_errno(errno, "stat of", path);
    if (!S_ISREG(st.st_mode)) {
      throw Error(ErrorCode::io_error, "FileStore: '" + path + "' is not a regular file");
    }
    std::vector<uint8_t> value(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < value.size()) {
      const size_t n = std::min(value.size() - done, kIoChunkBytes);
      const ssize_t r = ::read(fd.fd, value.data() + done, n);
      if (r < 0) {
        if (errno == EINTR) continue;
        throw_errno(errno, "reading", path);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    // Files are never modified in place, so a short read means someone outside the store
    // truncated the file.
    if (done != value.size()) {
      throw Error(ErrorCode::corrupt_input, "FileStore: '" + path + "' shrank while being read (" +
                                                std::to_string(done) + " of " +
                                                std::to_string(value.size()) + " bytes)");
    }
    return value;
  }

  bool exists(std::string_view key) override {
    const std::string path = path_for(key);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {  // a link is not a value (try_get refuses it)
      if (errno == ENOENT) return false;
      throw_errno(errno, "stat of", path);
    }
    return S_ISREG(st.st_mode);
  }

  bool remove(std::string_view key) override {
    const std::string path = path_for(key);
    if (::unlink(path.c_str()) != 0) {
      if (errno == ENOENT) return false;
      throw_errno(errno, "removing", path);
    }
    fsync_dir(dir_);
    return true;
  }

  std::vector<std::string> list(std::string_view prefix) override {
    DIR* dir = ::opendir(dir_.c_str());
    if (dir == nullptr) throw_errno(errno, "listing directory", dir_);
    std::vector<std::string> keys;
    errno = 0;
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_type != DT_REG && entry->d_type != DT_UNKNOWN) continue;
      auto key = file_name_to_key(entry->d_name);
      if (key && key->starts_with(prefix)) keys.push_back(std::move(*key));
    }
    const int err = errno;
    ::closedir(dir);
    if (err != 0) throw_errno(err, "reading directory", dir_);
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  std::string url() const override { return "file://" + dir_; }

  GcResult gc(std::chrono::milliseconds grace) override {
    // A live writer's temp file is younger than the grace period (it is written and renamed
    // in one put); an older one belongs to a writer that died.
    DIR* dir = ::opendir(dir_.c_str());
    if (dir == nullptr) throw_errno(errno, "listing directory", dir_);
    std::vector<std::string> stale;
    const auto now = std::chrono::system_clock::now();
    int err = 0;
    for (;;) {
      errno = 0;
      const dirent* entry = ::readdir(dir);
      if (entry == nullptr) {
        err = errno;
        break;
      }
      if (std::strncmp(entry->d_name, ".tmp-", 5) != 0) continue;
      struct stat st {};
      if (::fstatat(::dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG(st.st_mode))
        continue;
      const auto mtime = std::chrono::system_clock::time_point(
          std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec));
      if (now - mtime >= grace) stale.emplace_back(entry->d_name);
    }
    ::closedir(dir);
    if (err != 0) throw_errno(err, "reading directory", dir_);
    GcResult result;
    for (const std::string& name : stale) {
      const std::string path = dir_ + "/" + name;
      if (::unlink(path.c_str()) == 0) {
        ++result.removed;
      } else if (errno != ENOENT) {
        throw_errno(errno, "removing", path);
      }
    }
    if (result.removed > 0) fsync_dir(dir_);
    return result;
  }

 private:
  std::string path_for(std::string_view key) const {
    check_store_key(key);
    std::string name = key_to_file_name(key);
    if (name.size() > kMaxFileNameBytes) {
      throw Error(ErrorCode::invalid_argument, "FileStore: key " + printable_key(key) +
                                                   " escapes to a " + std::to_string(name.size()) +
                                                   "-byte file name; the limit is " +
                                                   std::to_string(kMaxFileNameBytes) +
                                                   " (each byte outside [A-Za-z0-9._-] takes 3)");
    }
    return dir_ + "/" + name;
  }

  std::string dir_;
};

}  // namespace

std::unique_ptr<Store> open_file_store(std::string_view dir, StoreOpen open) {
  if (dir.empty()) throw Error(ErrorCode::invalid_argument, "FileStore: directory is empty");
  if (dir.find('\0') != std::string_view::npos) {
    throw Error(ErrorCode::invalid_argument, "FileStore: directory path contains a NUL byte");
  }
  std::string path(dir);
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::error_code ec;
  if (open == StoreOpen::existing) {
    if (!std::filesystem::exists(path, ec)) {
      throw Error(ErrorCode::not_found, "FileStore: directory '" + path + "' does not exist");
    }
  } else {
    std::filesystem::create_directories(path, ec);
  }
  if (ec) {
    throw Error(ErrorCode::io_error,
                "FileStore: cannot create directory '" + path + "': " + ec.message());
  }
  if (!std::filesystem::is_directory(path, ec)) {
    throw Error(ErrorCode::io_error, "FileStore: '" + path + "' is not a directory");
  }
  return std::make_unique<FileStore>(std::move(path));
}

}  // namespace cachegen
