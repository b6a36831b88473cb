// One hiredis connection with timeouts, as used by RedisStore. Not thread-safe: the owner
// serialises calls.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cachegen/error.h"

struct redisContext;
struct redisReply;

namespace cachegen::store_detail {

// The connection broke (closed, reset, timed out) during a command. Never escapes RedisStore:
// it reconnects and retries once, then reports Error(unavailable).
class ConnectionLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A reply ran past the byte limit its command allows (a hostile or broken server: an endless
// or oversized bulk). The connection has been closed; not retried. Error(io_error).
class ReplyTooLarge : public Error {
 public:
  using Error::Error;
};

// Replies of commands that return no value data (SCAN pages, script results, status) are cut
// off at this many bytes.
inline constexpr uint64_t kDefaultMaxReplyBytes = uint64_t{64} << 20;

struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept;
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

class RedisConnection {
 public:
  // With a non-empty password, every connection starts with AUTH [username] password.
  RedisConnection(std::string host, int port, int db, int connect_timeout_ms,
                  int command_timeout_ms, std::string username = {}, std::string password = {});
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Connects, sets the command timeout and selects the database unless already connected.
  // Throws Error(unavailable) naming the server and the reason.
  void ensure_connected();

  // Sends one command (binary-safe arguments) and returns its reply, never a null one.
  // A transport failure closes the connection and throws ConnectionLost; an error reply from
  // the server throws Error(io_error) quoting it; a reply of more than max_reply_bytes bytes on
  // the wire is cut off there (ReplyTooLarge): memory follows what the caller expects, not
  // what the server sends.
  Reply command(const std::vector<std::string_view>& args,
                uint64_t max_reply_bytes = kDefaultMaxReplyBytes);

  // "redis://host:port/db"
  const std::string& url() const { return url_; }

 private:
  void close();

  std::string host_;
  int port_;
  int db_;
  int connect_timeout_ms_;
  int command_timeout_ms_;
  std::string username_, password_;
  std::string url_;
  redisContext* ctx_ = nullptr;
};

}  // namespace cachegen::store_detail
