#include "store/fake_redis.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace cachegen::test {
namespace {

// The next complete RESP command in buf starting at pos (its arguments), advancing pos; false
// when more bytes are needed.
bool next_command(const std::string& buf, size_t& pos, std::vector<std::string>& args) {
  size_t p = pos;
  auto line = [&](char tag, long& n) {
    if (p >= buf.size() || buf[p] != tag) return false;
    const size_t end = buf.find("\r\n", p);
    if (end == std::string::npos) return false;
    n = std::stol(buf.substr(p + 1, end - p - 1));
    p = end + 2;
    return true;
  };
  long count = 0;
  if (!line('*', count)) return false;
  args.clear();
  for (long i = 0; i < count; ++i) {
    long len = 0;
    if (!line('$', len) || buf.size() < p + static_cast<size_t>(len) + 2) return false;
    args.push_back(buf.substr(p, static_cast<size_t>(len)));
    p += static_cast<size_t>(len) + 2;
  }
  pos = p;
  return true;
}

}  // namespace

FakeRedis::FakeRedis(std::string getrange_reply, uint64_t send_cap)
    : getrange_reply_(std::move(getrange_reply)), send_cap_(send_cap) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 4) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("FakeRedis: cannot listen: " + std::string(std::strerror(errno)));
  }
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

FakeRedis::~FakeRedis() {
  ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  thread_.join();
  ::close(listen_fd_);
}

void FakeRedis::serve() {
  for (;;) {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    ++connections_;
    const int small = 64 << 10;  // little in flight: what is sent is what the client took
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    serve_connection(fd);
    ::close(fd);
  }
}

void FakeRedis::serve_connection(int fd) {
  std::string buf;
  size_t pos = 0;
  std::vector<std::string> args;
  auto send_all = [&](std::string_view b) {
    while (!b.empty()) {
      const ssize_t n = ::send(fd, b.data(), b.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent_ += static_cast<uint64_t>(n);
      b.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  };
  char in[4096];
  for (;;) {
    while (next_command(buf, pos, args)) {
      const std::string& cmd = args.front();
      if (cmd == "SELECT" || cmd == "AUTH") {
        if (!send_all("+OK\r\n")) return;
      } else if (cmd == "GETRANGE" && !getrange_reply_.empty()) {
        std::string reply = "$";
        reply.append(std::to_string(getrange_reply_.size())).append("\r\n");
        reply.append(getrange_reply_).append("\r\n");
        if (!send_all(reply)) return;
      } else {
        if (!send_all("$4294967296\r\n")) return;
        const std::string junk(64 << 10, 'x');
        while (sent_ < send_cap_) {
          if (!send_all(junk)) return;
        }
        return;  // gave up: hang up
      }
    }
    const ssize_t n = ::recv(fd, in, sizeof in, 0);
    if (n <= 0) return;
    buf.append(in, static_cast<size_t>(n));
  }
}

}  // namespace cachegen::test
