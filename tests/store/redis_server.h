// A throwaway redis-server for tests: loopback only, a free port, no persistence, a temp dir.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace cachegen::test {

class RedisServer {
 public:
  // The server shared by every test in this process, started on first use and stopped at exit.
  // Throws std::runtime_error (telling the reader to run scripts/install-deps.sh when
  // redis-server is not on PATH) if it cannot be started.
  static RedisServer& shared();

  // Starts; throws std::runtime_error on failure. With a password, the server requires it
  // (--requirepass) and command() authenticates.
  explicit RedisServer(std::string password = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/0"; }

  void kill_hard();  // SIGKILL and reap; the data is gone
  void restart();    // starts again on the same port (after kill_hard)
  void pause();      // SIGSTOP: the port still accepts connections but nothing answers
  void resume();     // SIGCONT
  bool running() const { return pid_ > 0; }

  // Runs one command on a fresh connection and returns the reply as text (strings verbatim,
  // integers in decimal, nil as "(nil)"); throws std::runtime_error on failure.
  std::string command(const std::vector<std::string>& args) const;

 private:
  void start();  // on port_, or on another free port where port_ was taken meanwhile
  // Starts on port_; false (and why) where the server exited at start-up or another
  // process's server answers there.
  bool try_start(std::string* why);
  void stop();

  std::string dir_;
  std::string password_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace cachegen::test
