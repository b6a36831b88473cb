#include "store/redis_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

namespace cachegen::test {
namespace {

bool on_path(const std::string& exe) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (!dir.empty() && ::access((dir + "/" + exe).c_str(), X_OK) == 0) return true;
  }
  return false;
}

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed: " + std::string(std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot find a free port: " + std::string(std::strerror(errno)));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};

class RedisEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { instance().reset(); }
  static std::unique_ptr<RedisServer>& instance() {
    static std::unique_ptr<RedisServer> server;
    return server;
  }
};
[[maybe_unused]] ::testing::Environment* const kRedisEnvironment =
    ::testing::AddGlobalTestEnvironment(new RedisEnvironment);

}  // namespace

RedisServer& RedisServer::shared() {
  auto& server = RedisEnvironment::instance();
  if (!server) server = std::make_unique<RedisServer>();
  if (!server->running()) server->restart();
  return *server;
}

RedisServer::RedisServer(std::string password) : password_(std::move(password)) {
  if (!on_path("redis-server")) {
    throw std::runtime_error(
        "redis-server is not on PATH; the RedisStore tests need a real server. "
        "Run scripts/install-deps.sh (Debian package redis-server) and try again.");
  }
  char tmpl[] = "/tmp/cachegen-redis-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
  }
  dir_ = tmpl;
  port_ = free_loopback_port();
  start();
}

RedisServer::~RedisServer() {
  stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

// free_loopback_port() only says that a port was free a moment ago: another test process may
// take it before our server binds it (its own server, or a connection's local port). Then our
// server exits at start-up, or our PING reaches the other server, and a test's FLUSHALL empties
// another's server under it (what explains a redis test's one failure, in 0.02 s, in five
// parallel ctest runs). A fresh server moves to another port; a restarted one must keep its
// port, which its clients hold.
void RedisServer::start() {
  std::string why;
  for (int attempt = 0; attempt < 8; ++attempt) {
    if (attempt > 0) port_ = free_loopback_port();
    if (try_start(&why)) return;
  }
  throw std::runtime_error(why);
}

bool RedisServer::try_start(std::string* why) {
  const std::string port = std::to_string(port_), log = dir_ + "/redis.log";
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test process
    const int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 1);
    ::dup2(null_fd, 2);
    std::vector<const char*> argv = {"redis-server", "--port",      port.c_str(), "--bind",
                                     "127.0.0.1",    "--save",      "",           "--appendonly",
                                     "no",           "--dir",       dir_.c_str(), "--logfile",
                                     log.c_str(),    "--daemonize", "no"};
    if (!password_.empty()) {
      argv.push_back("--requirepass");
      argv.push_back(password_.c_str());
    }
    argv.push_back(nullptr);
    ::execvp("redis-server", const_cast<char* const*>(argv.data()));
    ::_exit(127);
  }
  pid_ = pid;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      *why = "redis-server exited during start-up; its log says:\n" + read_file(log);
      return false;
    }
    // Ours, or another process's server on this port? (Before ours listens, the command fails.)
    std::string info;
    try {
      info = command({"INFO", "server"});
    } catch (const std::runtime_error&) {
    }
    if (!info.empty()) {
      if (info.find("process_id:" + std::to_string(pid_) + "\r") != std::string::npos) return true;
      kill_hard();
      *why = "port " + port + " was taken by another redis-server before ours bound it";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop();
  throw std::runtime_error("redis-server on port " + port + " did not answer within 10 s");
}

void RedisServer::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 250; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill_hard();
}

void RedisServer::kill_hard() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void RedisServer::restart() {
  kill_hard();
  std::string why;
  if (!try_start(&why)) throw std::runtime_error(why);
}

void RedisServer::pause() {
  ::kill(pid_, SIGSTOP);
}
void RedisServer::resume() {
  ::kill(pid_, SIGCONT);
}

std::string RedisServer::command(const std::vector<std::string>& args) const {
  const timeval tv{2, 0};
  std::unique_ptr<redisContext, ContextFree> c(redisConnectWithTimeout("127.0.0.1", port_, tv));
  if (!c || c->err) {
    throw std::runtime_error("cannot connect to test redis: " +
                             std::string(c ? c->errstr : "out of memory"));
  }
  redisSetTimeout(c.get(), tv);
  if (!password_.empty()) {
    auto* a = static_cast<redisReply*>(redisCommand(c.get(), "AUTH %s", password_.c_str()));
    if (a == nullptr) throw std::runtime_error("test redis AUTH failed: " + std::string(c->errstr));
    freeReplyObject(a);
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(c.get(), static_cast<int>(args.size()), argv.data(), lens.data()));
  if (r == nullptr)
    throw std::runtime_error("test redis command failed: " + std::string(c->errstr));
  std::string out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out = std::to_string(r->integer);
      break;
    case REDIS_REPLY_NIL:
      out = "(nil)";
      break;
    case REDIS_REPLY_ARRAY:
      out = "(array of " + std::to_string(r->elements) + ")";
      break;
    default:
      out.assign(r->str, r->len);
  }
  const bool error = r->type == REDIS_REPLY_ERROR;
  freeReplyObject(r);
  if (error) throw std::runtime_error("test redis refused " + args.front() + ": " + out);
  return out;
}

}  // namespace cachegen::test
