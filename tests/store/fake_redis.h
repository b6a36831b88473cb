// A hostile stand-in for a Redis server on loopback, for client-side limits only (everything
// else is tested against a real redis-server): it answers SELECT and AUTH with +OK, GETRANGE
// with a fixed manifest header (or, when none is set, like anything else), and every other
// command with a bulk reply announcing 4 GiB and then sending bytes until the client hangs up
// (or `send_cap` bytes have gone).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

namespace cachegen::test {

class FakeRedis {
 public:
  explicit FakeRedis(std::string getrange_reply = {}, uint64_t send_cap = uint64_t{256} << 20);
  ~FakeRedis();
  FakeRedis(const FakeRedis&) = delete;
  FakeRedis& operator=(const FakeRedis&) = delete;

  int port() const { return port_; }
  uint64_t bytes_sent() const { return sent_; }  // over all connections
  int connections() const { return connections_; }

 private:
  void serve();
  void serve_connection(int fd);

  std::string getrange_reply_;
  uint64_t send_cap_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<uint64_t> sent_{0};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

}  // namespace cachegen::test
