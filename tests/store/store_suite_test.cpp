// One suite, run against every Store back end: the contract in cachegen/store.h.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "cachegen/error.h"
#include "cachegen/store.h"
#include "store/redis_server.h"
#include "store/store_test_support.h"

namespace cachegen::test {
namespace {

using Bytes = std::vector<uint8_t>;

class StoreSuite : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "file") {
      dir_ = std::make_unique<TempDir>();
    } else {
      try {
        RedisServer& server = RedisServer::shared();
        server.command({"FLUSHALL"});
        port_ = server.port();
      } catch (const std::exception& e) {
        GTEST_FAIL() << e.what();
      }
    }
    store_ = open_another();
  }

  // A second, independent handle on the same store (another connection for Redis).
  std::unique_ptr<Store> open_another() const {
    if (dir_) return open_file_store(dir_->path());
    return open_redis_store("127.0.0.1", port_, 0, test_redis_options());
  }

  std::unique_ptr<TempDir> dir_;
  int port_ = 0;
  std::unique_ptr<Store> store_;
};

Bytes bytes_of(std::string_view s) {
  return Bytes(s.begin(), s.end());
}

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::ok;
}

TEST_P(StoreSuite, EmptyValueRoundTrips) {
  store_->put("empty", {});
  EXPECT_TRUE(store_->exists("empty"));
  EXPECT_EQ(store_->get("empty"), Bytes{});
}

TEST_P(StoreSuite, OneByteRoundTrips) {
  store_->put("one", Bytes{0x7f});
  EXPECT_EQ(store_->get("one"), Bytes{0x7f});
}

TEST_P(StoreSuite, BinaryWithNulsRoundTrips) {
  Bytes v;
  for (int i = 0; i < 1024; ++i) v.push_back(static_cast<uint8_t>(i % 3 == 0 ? 0 : i));
  store_->put("bin", v);
  EXPECT_EQ(store_->get("bin"), v);
}

TEST_P(StoreSuite, ValuesOnPartBoundariesRoundTrip) {
  const size_t part = test_redis_options().part_bytes;
  for (size_t n : {part - 1, part, part + 1, 2 * part, 2 * part + 1}) {
    const Bytes v = random_bytes(n, n);
    store_->put("edge", v);
    ASSERT_EQ(store_->get("edge"), v) << n << " bytes";
  }
}

TEST_P(StoreSuite, TenMebibyteValueRoundTrips) {
  const Bytes v = random_bytes((size_t{10} << 20) + 123, 42);
  store_->put("big", v);
  EXPECT_EQ(store_->get("big"), v);
  EXPECT_EQ(open_another()->get("big"), v);
}

TEST_P(StoreSuite, OverwriteReplacesWholeValue) {
  const Bytes big = random_bytes(size_t{3} << 20, 1), small = bytes_of("small");
  store_->put("k", big);
  store_->put("k", small);
  EXPECT_EQ(store_->get("k"), small);
  store_->put("k", big);
  EXPECT_EQ(store_->get("k"), big);
  EXPECT_EQ(store_->list(), std::vector<std::string>{"k"});
}

TEST_P(StoreSuite, RemoveDeletesAndReportsWhetherItExisted) {
  store_->put("gone", random_bytes(size_t{2} << 20, 3));
  EXPECT_TRUE(store_->remove("gone"));
  EXPECT_FALSE(store_->exists("gone"));
  EXPECT_FALSE(store_->try_get("gone").has_value());
  EXPECT_FALSE(store_->remove("gone"));
  EXPECT_TRUE(store_->list().empty());
}

TEST_P(StoreSuite, MissingKeyIsNotFound) {
  EXPECT_FALSE(store_->exists("nope"));
  EXPECT_FALSE(store_->try_get("nope").has_value());
  try {
    store_->get("nope");
    FAIL() << "get of a missing key returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
  }
}

TEST_P(StoreSuite, ListFiltersByPrefixAndSorts) {
  const std::vector<std::string> keys = {"b", "a/2", "ab", "a/1", "x*y", "x?", "[z]", "a\\b"};
  for (const auto& k : keys) store_->put(k, bytes_of(k));
  EXPECT_EQ(store_->list(),
            (std::vector<std::string>{"[z]", "a/1", "a/2", "a\\b", "ab", "b", "x*y", "x?"}));
  EXPECT_EQ(store_->list("a"), (std::vector<std::string>{"a/1", "a/2", "a\\b", "ab"}));
  EXPECT_EQ(store_->list("a/"), (std::vector<std::string>{"a/1", "a/2"}));
  EXPECT_EQ(store_->list("x*"), std::vector<std::string>{"x*y"});  // '*' is literal
  EXPECT_EQ(store_->list("["), std::vector<std::string>{"[z]"});
  EXPECT_TRUE(store_->list("zzz").empty());
}

TEST_P(StoreSuite, UnusualButValidKeysRoundTrip) {
  const std::vector<std::string> keys = {
      ".", "..",      "../escape", "/abs",     "a/b/c",   "%41",
      "%", ".hidden", "sp ace",    "\xc3\xbc", "cgs:m:x", std::string(kMaxStoreKeyBytes, 'k')};
  for (const auto& k : keys) store_->put(k, bytes_of("v:" + k));
  for (const auto& k : keys) EXPECT_EQ(store_->get(k), bytes_of("v:" + k)) << k;
  auto sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(store_->list(), sorted);
}

TEST_P(StoreSuite, InvalidKeysAreRejected) {
  const std::vector<std::string> bad = {"", std::string("a\0b", 3), "line\nbreak", "\x7f",
                                        std::string(kMaxStoreKeyBytes + 1, 'k')};
  for (const auto& k : bad) {
    EXPECT_EQ(code_of([&] { store_->put(k, bytes_of("x")); }), ErrorCode::invalid_argument);
    EXPECT_EQ(code_of([&] { store_->get(k); }), ErrorCode::invalid_argument);
    EXPECT_EQ(code_of([&] { store_->exists(k); }), ErrorCode::invalid_argument);
    EXPECT_EQ(code_of([&] { store_->remove(k); }), ErrorCode::invalid_argument);
  }
  EXPECT_TRUE(store_->list().empty());
}

TEST_P(StoreSuite, UrlReopensTheSameStore) {
  store_->put("k", bytes_of("v"));
  EXPECT_EQ(open_store(store_->url())->get("k"), bytes_of("v"));
}

// Writers on their own handles and on the shared one, readers on the shared one: every read
// must be one whole value. Values span several Redis parts so that a mix would be visible.
TEST_P(StoreSuite, ConcurrentWritersNeverProduceTornReads) {
  constexpr int kWriters = 3, kWritesEach = 12;
  const size_t base = (size_t{2} << 20) + 17;
  store_->put("hot", self_checking_value(0, base));
  std::atomic<int> writers_left{kWriters};
  std::atomic<int> torn{0}, reads{0};
  std::mutex errors_mu;
  std::vector<std::string> errors;
  auto record_error = [&](const char* what) {
    std::lock_guard lock(errors_mu);
    errors.emplace_back(what);
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      try {
        auto own = open_another();
        Store& s = (w == 0) ? *store_ : *own;
        for (int i = 0; i < kWritesEach; ++i) {
          s.put("hot", self_checking_value(uint64_t(w) * 1000 + i + 1, base + w * 4099 + i));
        }
      } catch (const std::exception& e) {
        record_error(e.what());
      }
      --writers_left;
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      try {
        while (writers_left > 0) {
          if (!is_whole_self_checking_value(store_->get("hot"))) ++torn;
          ++reads;
        }
      } catch (const std::exception& e) {
        record_error(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  EXPECT_TRUE(errors.empty()) << (errors.empty() ? "" : errors.front());
  EXPECT_TRUE(is_whole_self_checking_value(store_->get("hot")));
  EXPECT_EQ(store_->list(), std::vector<std::string>{"hot"});
}

// A writer process killed in the middle of a put leaves the old value or the new one, whole.
TEST_P(StoreSuite, WriterKilledMidPutLeavesOldOrNewValue) {
  const Bytes old_value = self_checking_value(1, size_t{3} << 20);
  store_->put("k", old_value);
  for (int delay_ms : {0, 5, 20, 60}) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      try {
        open_another()->put("k", self_checking_value(2, size_t{48} << 20));
      } catch (...) {
        ::_exit(1);
      }
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    const Bytes now = store_->get("k");
    EXPECT_TRUE(is_whole_self_checking_value(now)) << "after " << delay_ms << " ms";
    EXPECT_TRUE(now == old_value || now.size() == (size_t{48} << 20));
    EXPECT_EQ(store_->list(), std::vector<std::string>{"k"});
  }
}

// Throughput of one 64 MiB value, printed next to memcpy of the same bytes (same run).
TEST_P(StoreSuite, Throughput64MiB) {
  const Bytes v = random_bytes(size_t{64} << 20, 9);
  using clock = std::chrono::steady_clock;
  auto mb_per_s = [&](auto&& f) {
    const auto t0 = clock::now();
    f();
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    return double(v.size()) / 1e6 / s;
  };
  Bytes copy(v.size());
  const double memcpy_mbs = mb_per_s([&] { std::memcpy(copy.data(), v.data(), v.size()); });
  const double put_mbs = mb_per_s([&] { store_->put("perf", v); });
  Bytes got;
  const double get_mbs = mb_per_s([&] { got = store_->get("perf"); });
  ASSERT_EQ(got, v);
  std::printf("[ perf ] %s 64 MiB: put %.0f MB/s, get %.0f MB/s (memcpy %.0f MB/s)\n",
              GetParam().c_str(), put_mbs, get_mbs, memcpy_mbs);
  RecordProperty("put_MBps", std::to_string(put_mbs));
  RecordProperty("get_MBps", std::to_string(get_mbs));
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreSuite, ::testing::Values("file", "redis"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace cachegen::test
