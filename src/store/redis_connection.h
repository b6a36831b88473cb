// One hiredis connection with timeouts, as used by RedisStore. Not thread-safe: the owner
// serialises calls.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

struct redisContext;
struct redisReply;

namespace cachegen::store_detail {

// The connection broke (closed, reset, timed out) during a command. Never escapes RedisStore:
// it reconnects and retries once, then reports Error(unavailable).
class ConnectionLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept;
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

class RedisConnection {
 public:
  RedisConnection(std::string host, int port, int db, int connect_timeout_ms,
                  int command_timeout_ms);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Connects, sets the command timeout and selects the database unless already connected.
  // Throws Error(unavailable) naming the server and the reason.
  void ensure_connected();

  // Sends one command (binary-safe arguments) and returns its reply, never a null one.
  // A transport failure closes the connection and throws ConnectionLost; an error reply from
  // the server throws Error(io_error) quoting it.
  Reply command(const std::vector<std::string_view>& args);

  // "redis://host:port/db"
  const std::string& url() const { return url_; }

 private:
  void close();

  std::string host_;
  int port_;
  int db_;
  int connect_timeout_ms_;
  int command_timeout_ms_;
  std::string url_;
  redisContext* ctx_ = nullptr;
};

}  // namespace cachegen::store_detail
