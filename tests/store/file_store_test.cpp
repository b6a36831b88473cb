// FileStore specifics: file names, temp files, directory errors, concurrent processes.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "cachegen/error.h"
#include "cachegen/store.h"
#include "store/store_key.h"
#include "store/store_test_support.h"

namespace cachegen::test {
namespace {

namespace fs = std::filesystem;
using store_detail::file_name_to_key;
using store_detail::key_to_file_name;

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(FileStoreKeys, FileNamesAreEscapedAndInvertible) {
  EXPECT_EQ(key_to_file_name("abc-1.2_3"), "abc-1.2_3");
  EXPECT_EQ(key_to_file_name("../x"), "%2E.%2Fx");
  EXPECT_EQ(key_to_file_name(".."), "%2E.");
  EXPECT_EQ(key_to_file_name("a%b c"), "a%25b%20c");
  EXPECT_EQ(key_to_file_name("\xc3\xbc"), "%C3%BC");
  for (std::string key : {"../x", "..", ".", "a%b c", "\xc3\xbc", "/", "a.b."}) {
    EXPECT_EQ(file_name_to_key(key_to_file_name(key)), key);
  }
  // Names the store never writes map to no key, so each key has exactly one file.
  for (std::string name : {".tmp-0123", ".", "..", "a%2f", "a%2", "a%zz", "a%41", "sp ace", ""}) {
    EXPECT_FALSE(file_name_to_key(name).has_value()) << name;
  }
}

TEST(FileStore, KeysNeverLeaveTheDirectory) {
  TempDir parent;
  const std::string dir = parent.path() + "/store";
  auto store = open_file_store(dir);
  store->put("../outside", std::vector<uint8_t>{1});
  store->put("/etc/passwd", std::vector<uint8_t>{2});
  EXPECT_EQ(dir_entries(parent.path()), std::vector<std::string>{"store"});
  EXPECT_EQ(dir_entries(dir), (std::vector<std::string>{"%2E.%2Foutside", "%2Fetc%2Fpasswd"}));
}

TEST(FileStore, KeysWhoseFileNameIsTooLongAreRejected) {
  TempDir dir;
  auto store = open_file_store(dir.path());
  try {
    store->put(std::string(100, '/'), std::vector<uint8_t>{1});
    FAIL() << "a 300-byte file name was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("300-byte file name"), std::string::npos) << e.what();
  }
}

TEST(FileStore, TempAndForeignFilesAreIgnored) {
  TempDir dir;
  auto store = open_file_store(dir.path());
  store->put("real", std::vector<uint8_t>{1, 2, 3});
  for (std::string junk : {".tmp-deadbeefdeadbeef", "bad%zz", "lower%2f", ".hidden"}) {
    std::ofstream(dir.path() + "/" + junk) << "partial";
  }
  fs::create_directory(dir.path() + "/subdir");
  EXPECT_EQ(store->list(), std::vector<std::string>{"real"});
  EXPECT_FALSE(store->exists("subdir"));
  EXPECT_EQ(store->get("real"), (std::vector<uint8_t>{1, 2, 3}));
}

TEST(FileStore, PutLeavesNoTempFilesBehind) {
  TempDir dir;
  auto store = open_file_store(dir.path());
  for (int i = 0; i < 5; ++i) store->put("k", random_bytes(1000 * i, i));
  EXPECT_EQ(dir_entries(dir.path()), std::vector<std::string>{"k"});
}

TEST(FileStore, CreatesMissingDirectoriesAndReportsUnusablePaths) {
  TempDir dir;
  auto nested = open_file_store(dir.path() + "/a/b/c/");
  nested->put("k", std::vector<uint8_t>{9});
  EXPECT_TRUE(fs::is_regular_file(dir.path() + "/a/b/c/k"));
  EXPECT_EQ(nested->url(), "file://" + dir.path() + "/a/b/c");

  std::ofstream(dir.path() + "/plain") << "x";
  try {
    open_file_store(dir.path() + "/plain/sub");
    FAIL() << "a directory under a regular file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error);
    EXPECT_NE(std::string(e.what()).find(dir.path() + "/plain/sub"), std::string::npos) << e.what();
  }
}

TEST(FileStore, OpeningForReadingNeverCreatesTheDirectory) {
  TempDir dir;
  const std::string missing = dir.path() + "/not/there";
  for (const std::string& url : {missing, "file://" + missing}) {
    try {
      open_store(url, StoreOpen::existing);
      FAIL() << "a missing directory was opened for reading: " << url;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::not_found) << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(dir.path() + "/not"));
  open_file_store(missing)->put("k", std::vector<uint8_t>{1});
  EXPECT_EQ(open_file_store(missing, StoreOpen::existing)->get("k"), std::vector<uint8_t>{1});
}

TEST(FileStore, LinksAndFifosPlantedInTheDirectoryAreNotRead) {
  TempDir dir;
  auto store = open_file_store(dir.path() + "/s");
  std::ofstream(dir.path() + "/secret") << "secret";
  fs::create_symlink(dir.path() + "/secret", dir.path() + "/s/planted");
  ASSERT_EQ(::mkfifo((dir.path() + "/s/fifo").c_str(), 0600), 0);
  for (const char* key : {"planted", "fifo"}) {
    try {
      store->get(key);  // a FIFO would block forever in open() without O_NONBLOCK
      FAIL() << key << " was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::io_error) << e.what();
    }
    EXPECT_FALSE(store->exists(key)) << key;
  }
}

TEST(FileStore, WriteErrorsNameThePathAndTheReason) {
  TempDir dir;
  auto store = open_file_store(dir.path() + "/s");
  fs::remove_all(dir.path() + "/s");  // the directory vanishes under the store
  try {
    store->put("k", std::vector<uint8_t>{1});
    FAIL() << "put into a removed directory succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error);
    const std::string what = e.what();
    EXPECT_NE(what.find(dir.path() + "/s/.tmp-"), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
  try {
    store->list();
    FAIL() << "list of a removed directory succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error);
  }
}

// Two processes hammer one key while this one reads: every read is one whole value.
TEST(FileStore, ForkedWritersNeverProduceTornReads) {
  TempDir dir;
  auto store = open_file_store(dir.path());
  store->put("hot", self_checking_value(0, 100000));
  std::vector<pid_t> children;
  for (int w = 1; w <= 2; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        auto own = open_file_store(dir.path());
        for (int i = 0; i < 60; ++i) {
          own->put("hot", self_checking_value(w * 1000 + i, 100000 + w * 7919 + i * 13));
        }
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  int reads = 0, torn = 0, running = 2;
  while (running > 0) {
    if (!is_whole_self_checking_value(store->get("hot"))) ++torn;
    ++reads;
    for (pid_t& pid : children) {
      int status = 0;
      if (pid > 0 && ::waitpid(pid, &status, WNOHANG) == pid) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a writer failed";
        pid = -1;
        --running;
      }
    }
  }
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  EXPECT_EQ(dir_entries(dir.path()), std::vector<std::string>{"hot"});
}

TEST(FileStore, GcRemovesOnlyStaleTempFiles) {
  // A writer killed between creating its temp file and renaming it leaves ".tmp-*" behind;
  // gc removes those older than the grace period (a live writer's is younger) and nothing else.
  TempDir dir;
  auto store = open_file_store(dir.path());
  store->put("real", std::vector<uint8_t>{1, 2, 3});
  for (std::string junk : {".tmp-00000000000000aa", ".tmp-00000000000000bb", ".hidden"}) {
    std::ofstream(dir.path() + "/" + junk) << "partial";
  }
  const timespec two_hours_ago[2] = {{::time(nullptr) - 7200, 0}, {::time(nullptr) - 7200, 0}};
  for (std::string old : {".tmp-00000000000000aa", ".hidden"}) {
    ASSERT_EQ(::utimensat(AT_FDCWD, (dir.path() + "/" + old).c_str(), two_hours_ago, 0), 0);
  }
  const Store::GcResult r = store->gc(std::chrono::hours(1));
  EXPECT_EQ(r.removed, 1u);
  EXPECT_EQ(dir_entries(dir.path()),
            (std::vector<std::string>{".hidden", ".tmp-00000000000000bb", "real"}));
  EXPECT_EQ(store->gc(std::chrono::milliseconds(0)).removed, 1u);  // no grace: every temp file
  EXPECT_EQ(dir_entries(dir.path()), (std::vector<std::string>{".hidden", "real"}));
  EXPECT_EQ(store->get("real"), (std::vector<uint8_t>{1, 2, 3}));
}

}  // namespace
}  // namespace cachegen::test
