// open_store() URL parsing.
#include <gtest/gtest.h>

#include "cachegen/error.h"
#include "store/store_url.h"

namespace cachegen::test {
namespace {

using store_detail::parse_store_url;
using store_detail::StoreUrl;

TEST(StoreUrl, FileUrlsAndPlainPaths) {
  EXPECT_EQ(parse_store_url("file:///var/kv").path, "/var/kv");
  EXPECT_EQ(parse_store_url("file://rel/dir").path, "rel/dir");
  EXPECT_EQ(parse_store_url("/plain/path").path, "/plain/path");
  EXPECT_EQ(parse_store_url("dir").kind, StoreUrl::Kind::file);
  EXPECT_EQ(parse_store_url("redis/sub").path, "redis/sub");  // a directory named redis
  EXPECT_EQ(parse_store_url("file:///dir:with:colons").path, "/dir:with:colons");
}

TEST(StoreUrl, RedisUrls) {
  StoreUrl u = parse_store_url("redis://cache.local:6380/2");
  EXPECT_EQ(u.kind, StoreUrl::Kind::redis);
  EXPECT_EQ(u.host, "cache.local");
  EXPECT_EQ(u.port, 6380);
  EXPECT_EQ(u.db, 2);
  u = parse_store_url("redis://10.0.0.1");
  EXPECT_EQ(u.port, 6379);
  EXPECT_EQ(u.db, 0);
  u = parse_store_url("redis://[::1]:7000/");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 7000);
}

TEST(StoreUrl, BadUrlsNameTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "URL is empty"},
      {"file://", "directory is empty"},
      {"s3://bucket", "unsupported scheme 's3'"},
      {"redis://", "host is empty"},
      {"redis://:6379", "host is empty"},
      {"redis://h:", "port is empty"},
      {"redis://h:0", "port '0' is not in 1..65535"},
      {"redis://h:70000", "port '70000'"},
      {"redis://h:12ab", "port '12ab'"},
      {"redis://h:6379/x", "database 'x'"},
      {"redis://h:6379/-1", "database '-1'"},
      {"redis://user@h:6379", "[USER]:PASSWORD@"},
      {"redis://user:@h:6379", "password is empty"},
      {"redis://:p%zz@h", "escape"},
      {"redis://h:6379/0?timeout=1", "query strings"},
      {"redis://[::1", "closing ']'"},
      // Mistyped URLs are not taken as directory paths.
      {"redis:/127.0.0.1:6391", "may not contain ':'"},
      {"redis:127.0.0.1", "may not contain ':'"},
      {"file:/tmp/kv", "may not contain ':'"},
      {"redis//127.0.0.1:6391", "may not contain ':'"},
      {"redis//127.0.0.1", "missing its ':'"},
      {"file///tmp/kv", "missing its ':'"},
      {"s3:/bucket", "may not contain ':'"},
      {"http://h/x", "unsupported scheme 'http'"},
  };
  for (const auto& [url, fragment] : cases) {
    try {
      parse_store_url(url);
      ADD_FAILURE() << "accepted '" << url << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
          << url << " -> " << e.what();
    }
  }
}

TEST(StoreUrl, RedisCredentials) {
  StoreUrl u = parse_store_url("redis://:pa%40ss/w:rd@cache.local:6380/2");
  EXPECT_EQ(u.username, "");
  EXPECT_EQ(u.password, "pa@ss/w:rd");
  EXPECT_EQ(u.host, "cache.local");
  EXPECT_EQ(u.port, 6380);
  EXPECT_EQ(u.db, 2);
  u = parse_store_url("redis://alice:pw@[::1]");
  EXPECT_EQ(u.username, "alice");
  EXPECT_EQ(u.password, "pw");
  EXPECT_EQ(u.host, "::1");
  // A malformed URL with a password is named without it.
  for (const char* url :
       {"redis://:hunter2@h:99999", "redis://:hunter2@/0", "redis://:hunter2@h/x"}) {
    try {
      parse_store_url(url);
      ADD_FAILURE() << url;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find("hunter2"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("***@"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace cachegen::test
