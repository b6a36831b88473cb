// RedisStore specifics: layout, damaged data, server loss, timeouts, reconnect.
#include <chrono>
#include <cstdlib>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "cachegen/error.h"
#include "cachegen/store.h"
#include "store/fake_redis.h"
#include "store/redis_manifest.h"
#include "store/redis_server.h"
#include "store/store_test_support.h"

namespace cachegen::test {
namespace {

using store_detail::encode_manifest_header;
using store_detail::manifest_key;
using store_detail::parse_manifest_header;
using store_detail::part_key;
using Bytes = std::vector<uint8_t>;

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    try {
      server_ = &RedisServer::shared();
      server_->command({"FLUSHALL"});
    } catch (const std::exception& e) {
      GTEST_FAIL() << e.what();
    }
    store_ = open_redis_store("127.0.0.1", server_->port(), 0, test_redis_options());
  }

  // The manifest of `key` as stored.
  store_detail::Manifest manifest_of(const std::string& key) {
    return parse_manifest_header(server_->command({"GET", manifest_key(key)}), key);
  }

  // Expects get(key) to throw `code` with `fragment` in its message.
  void expect_get_error(const std::string& key, ErrorCode code, const std::string& fragment) {
    try {
      store_->get(key);
      ADD_FAILURE() << "get(" << key << ") returned a value";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }

  RedisServer* server_ = nullptr;
  std::unique_ptr<Store> store_;
};

// By default superseded parts expire after a grace period, so that a reader holding the old
// manifest can still finish; nothing is left once it passes.
TEST_F(RedisStoreTest, SupersededPartsExpireAfterTheGracePeriod) {
  RedisStoreOptions options = test_redis_options();
  options.superseded_grace_ms = 300;
  store_ = open_redis_store("127.0.0.1", server_->port(), 0, options);
  store_->put("k", random_bytes(size_t{3} << 20, 1));
  const auto old = manifest_of("k");
  store_->put("k", Bytes{7});
  const long long ttl = std::stoll(server_->command({"PTTL", part_key("k", old.generation, 0)}));
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, 300);
  EXPECT_EQ(store_->get("k"), Bytes{7});
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_EQ(server_->command({"DBSIZE"}), "1");
}

TEST_F(RedisStoreTest, LayoutIsManifestPlusParts) {
  store_->put("small", Bytes{1, 2, 3});
  EXPECT_EQ(manifest_of("small").parts, 0u);
  EXPECT_EQ(server_->command({"DBSIZE"}), "1");  // inline: the manifest is the only key

  store_->put("big", random_bytes((size_t{5} << 20) + 1, 5));
  const auto m = manifest_of("big");
  EXPECT_EQ(m.parts, 6u);
  EXPECT_EQ(m.part_bytes, 1u << 20);
  EXPECT_EQ(m.total_bytes, (uint64_t{5} << 20) + 1);
  EXPECT_EQ(server_->command({"DBSIZE"}), "8");
  EXPECT_EQ(server_->command({"STRLEN", part_key("big", m.generation, 5)}), "1");
}

TEST_F(RedisStoreTest, OverwriteAndRemoveLeaveNoPartsBehind) {
  RedisStoreOptions options = test_redis_options();
  options.superseded_grace_ms = 0;  // delete superseded parts at once
  store_ = open_redis_store("127.0.0.1", server_->port(), 0, options);
  store_->put("k", random_bytes(size_t{10} << 20, 1));
  store_->put("k", random_bytes(size_t{4} << 20, 2));
  EXPECT_EQ(server_->command({"DBSIZE"}), "5");
  store_->put("k", Bytes{1});
  EXPECT_EQ(server_->command({"DBSIZE"}), "1");
  store_->put("k", random_bytes(size_t{3} << 20, 3));
  EXPECT_TRUE(store_->remove("k"));
  EXPECT_EQ(server_->command({"DBSIZE"}), "0");
}

TEST_F(RedisStoreTest, MissingPartIsCorruptNotReturned) {
  store_->put("k", random_bytes(size_t{3} << 20, 1));
  const auto m = manifest_of("k");
  server_->command({"DEL", part_key("k", m.generation, 1)});
  expect_get_error("k", ErrorCode::corrupt_input, "missing part 1 of 3");
  EXPECT_TRUE(store_->exists("k"));
  store_->put("k", Bytes{7});  // an overwrite repairs it
  EXPECT_EQ(store_->get("k"), Bytes{7});
}

TEST_F(RedisStoreTest, CorruptedPartFailsChecksum) {
  store_->put("k", random_bytes(size_t{3} << 20, 1));
  const auto m = manifest_of("k");
  const std::string part = part_key("k", m.generation, 2);
  const std::string byte = server_->command({"GETRANGE", part, "100", "100"});
  server_->command({"SETRANGE", part, "100", std::string(1, char(byte[0] ^ 1))});
  expect_get_error("k", ErrorCode::corrupt_input, "XXH64");
}

TEST_F(RedisStoreTest, TruncatedPartIsCorrupt) {
  store_->put("k", random_bytes(size_t{3} << 20, 1));
  const auto m = manifest_of("k");
  server_->command({"SET", part_key("k", m.generation, 0), "short"});
  expect_get_error("k", ErrorCode::corrupt_input, "part 0 of 5 bytes; expected 1048576");
}

TEST_F(RedisStoreTest, CorruptedInlineValueFailsChecksum) {
  store_->put("k", Bytes(100, 0x55));
  server_->command({"SETRANGE", manifest_key("k"), "80", "X"});
  expect_get_error("k", ErrorCode::corrupt_input, "XXH64");
  server_->command({"APPEND", manifest_key("k"), "extra"});
  expect_get_error("k", ErrorCode::corrupt_input, "holds 105 bytes but its manifest says 100");
}

TEST_F(RedisStoreTest, ForgedManifestsAreCorrupt) {
  server_->command({"SET", manifest_key("junk"), "not a manifest"});
  expect_get_error("junk", ErrorCode::corrupt_input, "shorter than its 74-byte header");
  std::string header = store_detail::encode_manifest_header({1, 3, 1024, 100000, 0});
  server_->command({"SET", manifest_key("forged"), header});
  expect_get_error("forged", ErrorCode::corrupt_input, "says 3 parts of 1024 bytes");
  header[10] = 'G';
  server_->command({"SET", manifest_key("badhex"), header});
  expect_get_error("badhex", ErrorCode::corrupt_input, "bad generation field at offset 10");
}

// A writer that died before its manifest leaves parts nobody points at: never a value.
TEST_F(RedisStoreTest, OrphanPartsAreNotAValue) {
  server_->command({"SET", part_key("k", 77, 0), "abc"});
  EXPECT_FALSE(store_->exists("k"));
  EXPECT_FALSE(store_->try_get("k").has_value());
  EXPECT_TRUE(store_->list().empty());
}

TEST_F(RedisStoreTest, UnreachableServerIsUnavailable) {
  RedisServer other;
  const int port = other.port();
  other.kill_hard();
  try {
    open_store("redis://127.0.0.1:" + std::to_string(port));
    FAIL() << "connected to a dead server";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unavailable);
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("refused"), std::string::npos) << e.what();
  }
}

TEST_F(RedisStoreTest, KilledServerGivesClearErrorThenReconnects) {
  store_->put("k", Bytes{1});
  server_->kill_hard();
  const std::string where = "127.0.0.1:" + std::to_string(server_->port());
  for (auto op : {+[](Store& s) { s.get("k"); }, +[](Store& s) { s.put("k", Bytes{2}); },
                  +[](Store& s) { s.list(); }}) {
    try {
      op(*store_);
      ADD_FAILURE() << "an operation on a dead server succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unavailable) << e.what();
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
    }
  }
  server_->restart();  // same port, empty (no persistence)
  EXPECT_FALSE(store_->try_get("k").has_value());
  store_->put("k", Bytes{3});
  EXPECT_EQ(store_->get("k"), Bytes{3});
}

TEST_F(RedisStoreTest, RestartBetweenCallsIsInvisible) {
  store_->put("k", Bytes{1});
  server_->restart();
  store_->put("k", Bytes{4});  // the first attempt hits the dead connection, the retry works
  EXPECT_EQ(store_->get("k"), Bytes{4});
}

TEST_F(RedisStoreTest, UnansweredCommandTimesOut) {
  RedisStoreOptions options = test_redis_options();
  options.command_timeout_ms = 200;
  auto impatient = open_redis_store("127.0.0.1", server_->port(), 0, options);
  impatient->put("k", Bytes{5});
  server_->pause();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    impatient->get("k");
    ADD_FAILURE() << "a paused server answered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unavailable) << e.what();
    EXPECT_NE(std::string(e.what()).find("200 ms"), std::string::npos) << e.what();
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  server_->resume();
  EXPECT_LT(waited, 3.0);
  EXPECT_EQ(impatient->get("k"), Bytes{5});
}

TEST_F(RedisStoreTest, DatabaseNumberIsHonoured) {
  auto db3 = open_store("redis://127.0.0.1:" + std::to_string(server_->port()) + "/3");
  db3->put("k", Bytes{3});
  EXPECT_FALSE(store_->exists("k"));
  EXPECT_EQ(db3->get("k"), Bytes{3});
  EXPECT_EQ(db3->url(), "redis://127.0.0.1:" + std::to_string(server_->port()) + "/3");
}

TEST_F(RedisStoreTest, BadOptionsAreRejected) {
  RedisStoreOptions options;
  options.part_bytes = 0;
  EXPECT_THROW(open_redis_store("127.0.0.1", server_->port(), 0, options), Error);
  EXPECT_THROW(open_redis_store("127.0.0.1", 0, 0), Error);
  EXPECT_THROW(open_redis_store("", 6379, 0), Error);
}

// Parts of generation `gen` of `key` now in Redis, and their PTTLs.
std::vector<long long> part_ttls(RedisServer& server, const std::string& key, uint64_t gen) {
  std::vector<long long> ttls;
  for (uint32_t i = 0;; ++i) {
    const long long ttl = std::stoll(server.command({"PTTL", part_key(key, gen, i)}));
    if (ttl == -2) break;  // no such key: parts are written in order
    ttls.push_back(ttl);
  }
  return ttls;
}

TEST_F(RedisStoreTest, CommittedPartsPersist) {
  store_->put("k", random_bytes(size_t{3} << 20, 1));
  const std::vector<long long> ttls = part_ttls(*server_, "k", manifest_of("k").generation);
  EXPECT_EQ(ttls, (std::vector<long long>{-1, -1, -1}));  // the swap made them persistent
  EXPECT_EQ(store_->gc().removed, 0u);
  EXPECT_EQ(store_->get("k"), random_bytes(size_t{3} << 20, 1));
}

TEST_F(RedisStoreTest, WriterKilledMidPutLeavesOnlyExpiringParts) {
  const Bytes old_value = random_bytes(size_t{2} << 20, 1), big = random_bytes(size_t{64} << 20, 2);
  store_->put("k", old_value);
  const uint64_t old_gen = manifest_of("k").generation;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the writer: small parts, so the put takes many round trips
    try {
      RedisStoreOptions o = test_redis_options();
      o.part_bytes = 64 << 10;
      open_redis_store("127.0.0.1", server_->port(), 0, o)->put("k", big);
    } catch (...) {
    }
    ::_exit(0);
  }
  // Kill it once some of its parts are in (more keys than the old manifest and its 2 parts).
  for (int i = 0; i < 20000 && std::stoll(server_->command({"DBSIZE"})) < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_EQ(manifest_of("k").generation, old_gen) << "the writer finished before it was killed";
  EXPECT_EQ(store_->get("k"), old_value);
  // Every key but the manifest and the old parts is a part of the dead writer, with an expiry.
  const long long leftovers = std::stoll(server_->command({"DBSIZE"})) - 3;
  ASSERT_GE(leftovers, 7);
  const Store::GcResult r = store_->gc();
  EXPECT_EQ(r.removed, 0u);
  EXPECT_EQ(r.expiring, static_cast<size_t>(leftovers));
  // Parts without an expiry (a writer from before this rule): gc deletes them, and only them.
  const std::string scan =
      server_->command({"EVAL",
                        "local n = 0\n"
                        "for _, k in ipairs(redis.call('KEYS', 'cgs:p:*')) do\n"
                        "  if redis.call('PTTL', k) > 0 then\n"
                        "    redis.call('PERSIST', k)\n"
                        "    n = n + 1\n"
                        "  end\n"
                        "end\n"
                        "return n\n",
                        "0"});
  EXPECT_EQ(std::stoll(scan), leftovers);
  const Store::GcResult again = store_->gc();
  EXPECT_EQ(again.removed, static_cast<size_t>(leftovers));
  EXPECT_EQ(again.expiring, 0u);
  EXPECT_EQ(server_->command({"DBSIZE"}), "3");
  EXPECT_EQ(store_->get("k"), old_value);
}

// Expects `f` to throw Error(io_error) saying the reply was cut off.
template <class F>
void expect_reply_cut_off(F&& f) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error) << e.what();
    EXPECT_NE(std::string(e.what()).find("sent more than"), std::string::npos) << e.what();
  }
}

TEST(RedisHostileServer, EndlessBulkReplyIsCutOffAtTheHeaderSize) {
  // Whatever is asked, the "server" announces a 4 GiB string and streams it. The client reads
  // the manifest header with a 138-byte limit, so it hangs up after one read; before, it kept
  // reading (and reconnected to read again).
  FakeRedis fake;
  auto store = open_redis_store("127.0.0.1", fake.port(), 0, test_redis_options());
  expect_reply_cut_off([&] { store->try_get("k"); });
  EXPECT_LT(fake.bytes_sent(), uint64_t{16} << 20);
  EXPECT_EQ(fake.connections(), 1);
}

TEST(RedisHostileServer, PartRepliesAreBoundedByTheManifest) {
  // A valid manifest of two 1 MiB parts, then an endless part: cut off just past 1 MiB, not at
  // the generic 64 MiB limit.
  store_detail::Manifest m;
  m.generation = 42;
  m.parts = 2;
  m.part_bytes = 1 << 20;
  m.total_bytes = 2 << 20;
  FakeRedis fake(store_detail::encode_manifest_header(m));
  auto store = open_redis_store("127.0.0.1", fake.port(), 0, test_redis_options());
  expect_reply_cut_off([&] { store->try_get("k"); });
  EXPECT_LT(fake.bytes_sent(), uint64_t{16} << 20);
}

TEST(RedisHostileServer, ForgedInlineSizeIsRejectedBeforeReading) {
  store_detail::Manifest m;
  m.total_bytes = uint64_t{1} << 40;  // inline, 1 TiB
  FakeRedis fake(store_detail::encode_manifest_header(m));
  auto store = open_redis_store("127.0.0.1", fake.port(), 0, test_redis_options());
  try {
    store->try_get("k");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_input) << e.what();
  }
  EXPECT_LT(fake.bytes_sent(), uint64_t{1} << 20);
}

// Expects open_store(url) to fail with unavailable, naming `fragment` and never `secret`.
void expect_auth_failure(const std::string& url, const std::string& fragment,
                         const std::string& secret) {
  try {
    open_store(url);
    ADD_FAILURE() << "connected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unavailable) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find(secret), std::string::npos) << e.what();
  }
}

TEST(RedisAuth, PasswordFromUrlOrEnvironment) {
  RedisServer server("s3cret-Pw");
  const std::string hostport = "127.0.0.1:" + std::to_string(server.port());
  {
    auto store = open_store("redis://:s3cret-Pw@" + hostport + "/0");
    store->put("k", random_bytes(size_t{3} << 20, 1));  // parts and all
    EXPECT_EQ(store->get("k"), random_bytes(size_t{3} << 20, 1));
    EXPECT_EQ(store->url().find("s3cret"), std::string::npos) << store->url();
  }
  // ACL form: the default user.
  EXPECT_EQ(open_store("redis://default:s3cret-Pw@" + hostport + "/0")->get("k"),
            random_bytes(size_t{3} << 20, 1));
  // Percent-escapes in the password.
  EXPECT_TRUE(open_store("redis://:s3cret%2DPw@" + hostport)->exists("k"));
  expect_auth_failure("redis://:wrong-guess@" + hostport + "/0", "authentication failed",
                      "wrong-guess");
  expect_auth_failure("redis://" + hostport + "/0", "CACHEGEN_REDIS_PASSWORD", "s3cret");
  ::setenv("CACHEGEN_REDIS_PASSWORD", "s3cret-Pw", 1);
  EXPECT_TRUE(open_store("redis://" + hostport)->exists("k"));
  ::setenv("CACHEGEN_REDIS_PASSWORD", "env-guess", 1);
  expect_auth_failure("redis://" + hostport, "authentication failed", "env-guess");
  ::unsetenv("CACHEGEN_REDIS_PASSWORD");
}

}  // namespace
}  // namespace cachegen::test
