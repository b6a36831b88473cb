#include "store/redis_connection.h"

#include <hiredis/hiredis.h>

#include <sys/time.h>
#include <cerrno>

#include "cachegen/error.h"

namespace cachegen::store_detail {
namespace {

timeval to_timeval(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

}  // namespace

void ReplyDeleter::operator()(redisReply* r) const noexcept {
  freeReplyObject(r);
}

RedisConnection::RedisConnection(std::string host, int port, int db, int connect_timeout_ms,
                                 int command_timeout_ms, std::string username, std::string password)
    : host_(std::move(host)),
      port_(port),
      db_(db),
      connect_timeout_ms_(connect_timeout_ms),
      command_timeout_ms_(command_timeout_ms),
      username_(std::move(username)),
      password_(std::move(password)) {
  const bool ipv6 = host_.find(':') != std::string::npos;
  url_ = "redis://" + (ipv6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_) + "/" +
         std::to_string(db_);
}

RedisConnection::~RedisConnection() {
  close();
}

void RedisConnection::close() {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

void RedisConnection::ensure_connected() {
  if (ctx_ != nullptr) return;
  auto unavailable = [&](const std::string& why) {
    return Error(ErrorCode::unavailable, "RedisStore: cannot connect to " + url_ + ": " + why);
  };
  redisContext* c = redisConnectWithTimeout(host_.c_str(), port_, to_timeval(connect_timeout_ms_));
  if (c == nullptr) throw unavailable("out of memory allocating the connection");
  if (c->err != 0) {
    const std::string why = c->errstr;
    redisFree(c);
    throw unavailable(why);
  }
  if (redisSetTimeout(c, to_timeval(command_timeout_ms_)) != REDIS_OK) {
    const std::string why = c->errstr;
    redisFree(c);
    throw unavailable("cannot set the command timeout: " + why);
  }
  ctx_ = c;
  if (!password_.empty()) {
    std::vector<std::string_view> auth{"AUTH"};
    if (!username_.empty()) auth.push_back(username_);
    auth.push_back(password_);
    try {
      command(auth);
    } catch (const ConnectionLost& e) {
      throw unavailable(std::string("no answer to AUTH: ") + e.what());
    } catch (const Error& e) {
      // The server's words (e.g. WRONGPASS) never contain the password; ours never do either.
      close();
      std::string why = e.what();
      for (size_t at; (at = why.find(password_)) != std::string::npos;)
        why.replace(at, password_.size(), "***");
      throw unavailable("authentication" +
                        (username_.empty() ? std::string() : " as '" + username_ + "'") +
                        " failed: " + why);
    }
  }
  try {
    // SELECT doubles as the handshake that proves the server answers.
    command({"SELECT", std::to_string(db_)});
  } catch (const ConnectionLost& e) {
    throw unavailable(std::string("no answer to SELECT: ") + e.what());
  } catch (const Error& e) {
    close();
    const bool noauth = std::string_view(e.what()).find("NOAUTH") != std::string_view::npos;
    throw unavailable(std::string("SELECT ") + std::to_string(db_) + " failed: " + e.what() +
                      (noauth && password_.empty()
                           ? " (give a password: redis://:PASSWORD@HOST or CACHEGEN_REDIS_PASSWORD)"
                           : ""));
  }
}

Reply RedisConnection::command(const std::vector<std::string_view>& args,
                               uint64_t max_reply_bytes) {
  ensure_connected();
  std::vector<const char*> argv;
  std::vector<size_t> argvlen;
  argv.reserve(args.size());
  argvlen.reserve(args.size());
  for (std::string_view a : args) {
    argv.push_back(a.data());
    argvlen.push_back(a.size());
  }
  auto lost = [&](int saved_errno) {
    std::string why = ctx_->errstr;
    if (ctx_->err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK)) {
      why = "no reply within the command timeout of " + std::to_string(command_timeout_ms_) + " ms";
    }
    close();
    return ConnectionLost("connection to " + url_ + " lost during " + std::string(args.front()) +
                          ": " + why);
  };
  errno = 0;
  if (redisAppendCommandArgv(ctx_, static_cast<int>(args.size()), argv.data(), argvlen.data()) !=
      REDIS_OK)
    throw lost(errno);
  for (int done = 0; !done;) {
    errno = 0;
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) throw lost(errno);
  }
  // redisGetReply's loop, counting the bytes fed to the reader (each read adds at most 16 KiB).
  void* raw = nullptr;
  uint64_t received = 0;
  for (;;) {
    if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) throw lost(0);
    if (raw != nullptr) break;
    const size_t before = ctx_->reader->len;
    errno = 0;
    if (redisBufferRead(ctx_) != REDIS_OK) throw lost(errno);
    received += ctx_->reader->len - before;
    if (received > max_reply_bytes) {
      close();
      throw ReplyTooLarge(ErrorCode::io_error,
                          "RedisStore: " + url_ + " sent more than " +
                              std::to_string(max_reply_bytes) + " bytes in reply to " +
                              std::string(args.front()) + " (the most it may); connection closed");
    }
  }
  Reply reply(static_cast<redisReply*>(raw));
  if (reply->type == REDIS_REPLY_ERROR) {
    throw Error(ErrorCode::io_error, "RedisStore: " + url_ + " refused " +
                                         std::string(args.front()) + ": " +
                                         std::string(reply->str, reply->len));
  }
  return reply;
}

}  // namespace cachegen::store_detail
