#include "store/store_url.h"

#include <charconv>
#include <cstdlib>
#include <limits>
#include <memory>

#include "cachegen/error.h"
#include "cachegen/store.h"

namespace cachegen {
namespace store_detail {
namespace {

// The URL with any redis "USER:PASSWORD@" replaced by "***@": a password never reaches a message.
std::string redacted(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos || url.substr(0, sep) != "redis") return std::string(url);
  const size_t start = sep + 3, at = url.substr(start).rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  return std::string(url.substr(0, start)) + "***" + std::string(url.substr(start + at));
}

[[noreturn]] void bad_url(std::string_view url, const std::string& problem) {
  throw Error(ErrorCode::invalid_argument, "bad store URL '" + redacted(url) + "': " + problem +
                                               " (expected file://DIR, a directory path, or "
                                               "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB])");
}

// %XX escapes decoded (so a password may hold '@', ':' or '/'); false on a bad escape.
bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    unsigned v = 0;
    if (in.size() - i < 3) return false;
    auto [end, ec] = std::from_chars(in.data() + i + 1, in.data() + i + 3, v, 16);
    if (ec != std::errc() || end != in.data() + i + 3) return false;
    out += static_cast<char>(v);
    i += 2;
  }
  return true;
}

// A decimal integer in [lo, hi] making up all of `text`, or -1.
long parse_decimal(std::string_view text, long lo, long hi) {
  long value = 0;
  if (text.empty() || text.size() > 10) return -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < lo || value > hi) return -1;
  return value;
}

StoreUrl parse_redis(std::string_view url, std::string_view rest) {
  StoreUrl out;
  out.kind = StoreUrl::Kind::redis;
  if (rest.find_first_of("?#") != std::string_view::npos) {
    bad_url(url, "query strings and fragments are not supported");
  }
  // Credentials end at the last '@' (a raw '/' or ':' in a password must not split the URL).
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    const size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) bad_url(url, "credentials must be [USER]:PASSWORD@");
    if (!percent_decode(userinfo.substr(0, colon), out.username) ||
        !percent_decode(userinfo.substr(colon + 1), out.password)) {
      bad_url(url, "credentials hold a bad %XX escape");
    }
    if (out.password.empty()) bad_url(url, "password is empty");
    rest = rest.substr(at + 1);
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) {
      const long n = parse_decimal(db, 0, std::numeric_limits<int>::max());
      if (n < 0) bad_url(url, "database '" + std::string(db) + "' is not a non-negative integer");
      out.db = static_cast<int>(n);
    }
  }
  std::string_view port;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) bad_url(url, "IPv6 host has no closing ']'");
    out.host = std::string(authority.substr(1, close - 1));
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after[0] != ':') bad_url(url, "unexpected text after ']'");
    if (!after.empty()) port = after.substr(1);
    if (after == ":") bad_url(url, "port is empty");
  } else {
    const size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) bad_url(url, "port is empty");
    }
  }
  if (out.host.empty()) bad_url(url, "host is empty");
  if (!port.empty()) {
    const long n = parse_decimal(port, 1, 65535);
    if (n < 0) bad_url(url, "port '" + std::string(port) + "' is not in 1..65535");
    out.port = static_cast<int>(n);
  }
  return out;
}

}  // namespace

StoreUrl parse_store_url(std::string_view url) {
  if (url.empty()) bad_url(url, "URL is empty");
  const size_t sep = url.find("://");
  StoreUrl out;
  if (sep == std::string_view::npos) {
    // A plain path. A ':' (as in "redis:/h:6379" or "redis:h") or a scheme name followed by
    // "//" ("redis//h") is far more likely a mistyped URL than a directory name, and taking it
    // as a directory would silently write somewhere unexpected.
    if (url.find(':') != std::string_view::npos) {
      bad_url(url,
              "a plain directory path may not contain ':' (mistyped scheme? a directory "
              "whose name has ':' is written file://PATH)");
    }
    if (url.starts_with("redis//") || url.starts_with("file//")) {
      bad_url(url, "looks like a URL missing its ':' (redis://... or file://...)");
    }
    out.path = std::string(url);
    return out;
  }
  const std::string_view scheme = url.substr(0, sep), rest = url.substr(sep + 3);
  if (scheme == "file") {
    if (rest.empty()) bad_url(url, "directory is empty");
    out.path = std::string(rest);
    return out;
  }
  if (scheme == "redis") return parse_redis(url, rest);
  bad_url(url, "unsupported scheme '" + std::string(scheme) + "'");
}

}  // namespace store_detail

std::unique_ptr<Store> open_store(std::string_view url, StoreOpen open) {
  const store_detail::StoreUrl parsed = store_detail::parse_store_url(url);
  if (parsed.kind == store_detail::StoreUrl::Kind::redis) {
    RedisStoreOptions options;
    options.username = parsed.username;
    options.password = parsed.password;
    if (options.password.empty()) {
      const char* env = std::getenv("CACHEGEN_REDIS_PASSWORD");
      if (env != nullptr) options.password = env;
    }
    return open_redis_store(parsed.host, parsed.port, parsed.db, options);
  }
  return open_file_store(parsed.path, open);
}

}  // namespace cachegen
