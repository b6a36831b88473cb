// Parsing of the store URLs accepted by open_store().
#pragma once

#include <string>
#include <string_view>

namespace cachegen::store_detail {

struct StoreUrl {
  enum class Kind { file, redis } kind = Kind::file;
  std::string path;                // file: the directory, verbatim
  std::string host;                // redis: host name or address (IPv6 without brackets)
  int port = 6379;                 // redis
  int db = 0;                      // redis
  std::string username, password;  // redis: from "USER:PASSWORD@" (both may be empty)
};

// Throws Error(invalid_argument) naming what is wrong with `url`.
StoreUrl parse_store_url(std::string_view url);

}  // namespace cachegen::store_detail
