#include "core/input_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

namespace {

// The live mappings the SIGBUS handler knows: a slot is taken by a compare-and-swap on `begin`
// (0: free); `end` and the path are written before `ready` is set, and the handler reads only
// slots that are ready (async-signal-safe: no locks, no allocation).
struct ListedMapping {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> ready{false};
  char path[240] = {};
};
ListedMapping g_listed[MappedFile::kListedMappings];
std::atomic<int> g_exit_code{1};

int list_mapping(const void* p, size_t n, const std::string& path) {
  const auto begin = reinterpret_cast<uintptr_t>(p);
  for (int i = 0; i < MappedFile::kListedMappings; ++i) {
    uintptr_t expected = 0;
    if (!g_listed[i].begin.compare_exchange_strong(expected, begin)) continue;
    const size_t len = std::min(path.size(), sizeof g_listed[i].path - 1);
    std::memcpy(g_listed[i].path, path.data(), len);
    g_listed[i].path[len] = 0;
    g_listed[i].end.store(begin + n);
    g_listed[i].ready.store(true);
    return i;
  }
  return -1;
}

void unlist_mapping(int slot) {
  g_listed[slot].ready.store(false);
  g_listed[slot].end.store(0);
  g_listed[slot].begin.store(0);
}

void write_all(const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void on_sigbus(int sig, siginfo_t* info, void*) {
  const auto at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const ListedMapping& m : g_listed) {
    if (!m.ready.load() || at < m.begin.load() || at >= m.end.load()) continue;
    static const char head[] = "error: '";
    static const char tail[] = "' was truncated while it was read (changed by another process)\n";
    write_all(head, sizeof head - 1);
    write_all(m.path, std::strlen(m.path));
    write_all(tail, sizeof tail - 1);
    ::_exit(g_exit_code.load());
  }
  // Not ours: the default action (the signal stays blocked until the handler returns).
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

MappedFile::MappedFile(const std::string& path) {
  uint64_t size = 0;
  const int fd = open_regular_input(path, size);
  if (size > SIZE_MAX) {
    ::close(fd);
    throw Error(ErrorCode::invalid_argument, "'" + path + "' is too large to map");
  }
  if (size > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw Error(ErrorCode::io_error, "cannot map '" + path + "': " + std::strerror(e));
    }
    p_ = p;
    n_ = static_cast<size_t>(size);
    slot_ = list_mapping(p_, n_, path);
  }
  ::close(fd);  // the mapping keeps the file
}

MappedFile::~MappedFile() {
  if (slot_ >= 0) unlist_mapping(slot_);
  if (p_ != nullptr) ::munmap(p_, n_);
}

void exit_on_truncated_mapping(int exit_code) noexcept {
  g_exit_code.store(exit_code);
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace cachegen::detail
