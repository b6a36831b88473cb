// read_file_bytes / write_file_atomic on what is not a plain regular file: links, FIFOs,
// devices, directories. Nothing may be replaced that is not a regular file, and no input may
// block or be read without bound.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "cachegen/error.h"
#include "cachegen/npy.h"

namespace cachegen {
namespace {

namespace fs = std::filesystem;

class FileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "cachegen-fileio-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const char* name) const { return dir_ + "/" + name; }
  static std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  static std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
  static ErrorCode code_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::ok;
  }
  std::string dir_;
};

TEST_F(FileIo, RegularFilesAreReplacedAtomically) {
  write_file_atomic(path("a"), bytes("first"));
  write_file_atomic(path("a"), bytes("second"));
  EXPECT_EQ(slurp(path("a")), "second");
  EXPECT_EQ(read_file_bytes(path("a")), bytes("second"));
  // No temp files left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(FileIo, ASymlinksTargetIsReplacedAndTheLinkKept) {
  write_file_atomic(path("target"), bytes("old"));
  fs::create_symlink("target", path("link"));       // relative, resolved against the link's dir
  fs::create_symlink(path("link"), path("link2"));  // a chain
  write_file_atomic(path("link2"), bytes("new"));
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_TRUE(fs::is_symlink(path("link2")));
  EXPECT_EQ(slurp(path("target")), "new");
  // A dangling link: its target is created.
  fs::create_symlink(path("later"), path("dangling"));
  write_file_atomic(path("dangling"), bytes("x"));
  EXPECT_TRUE(fs::is_symlink(path("dangling")));
  EXPECT_EQ(slurp(path("later")), "x");
}

TEST_F(FileIo, FifosAndDevicesAreWrittenThroughNotReplaced) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  // The read end opened first without blocking: the write needs no thread, and a regression
  // that renamed over the FIFO shows as nothing to read rather than as a hang.
  const int rd = ::open(path("fifo").c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(rd, 0);
  write_file_atomic(path("fifo"), bytes("through the pipe"));  // fits the pipe's buffer
  char buf[64] = {};
  const ssize_t n = ::read(rd, buf, sizeof buf);
  ::close(rd);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "through the pipe");
  EXPECT_TRUE(fs::is_fifo(path("fifo")));
  write_file_atomic("/dev/null", bytes("discarded"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

TEST_F(FileIo, OutputFileWritesPiecesOutOfOrderAndPublishesOnCommit) {
  write_file_atomic(path("out"), bytes("old contents"));
  {
    OutputFile f(path("out"));
    f.write_at(6, bytes("world"));
    f.write_at(0, bytes("hello "));
    // Nothing changes at the name until commit.
    EXPECT_EQ(slurp(path("out")), "old contents");
    f.commit();
  }
  EXPECT_EQ(slurp(path("out")), "hello world");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  // Abandoned (an error before commit): the old file stays, no temp file is left.
  {
    OutputFile f(path("out"));
    f.write_at(0, bytes("partial"));
    // While it writes, the directory shows nothing new: a writer killed now leaves nothing.
    EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  }
  EXPECT_EQ(slurp(path("out")), "hello world");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  // A gap reads as zeros.
  {
    OutputFile f(path("gap"));
    f.write_at(3, bytes("x"));
    f.commit();
  }
  EXPECT_EQ(slurp(path("gap")), std::string("\0\0\0x", 4));
}

TEST_F(FileIo, OutputFileWritesAFifoInOrderFromItsSpill) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  const int rd = ::open(path("fifo").c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(rd, 0);
  {
    OutputFile f(path("fifo"));
    f.write_at(4, bytes("tail"));
    f.write_at(0, bytes("head"));
    f.commit();
  }
  char buf[64] = {};
  const ssize_t n = ::read(rd, buf, sizeof buf);
  ::close(rd);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "headtail");
  EXPECT_TRUE(fs::is_fifo(path("fifo")));
  OutputFile dev("/dev/null");  // a seekable device: written in place
  dev.write_at(100, bytes("x"));
  dev.commit();
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

TEST_F(FileIo, ADirectoryIsNeitherReplacedNorRead) {
  fs::create_directory(path("d"));
  EXPECT_EQ(code_of([&] { write_file_atomic(path("d"), bytes("x")); }),
            ErrorCode::invalid_argument);
  EXPECT_TRUE(fs::is_directory(path("d")));
  EXPECT_EQ(code_of([&] { read_file_bytes(path("d")); }), ErrorCode::invalid_argument);
}

TEST_F(FileIo, InputsMustBeRegularFiles) {
  // /dev/zero would be read until memory runs out; a FIFO without a writer would block in
  // open(). Both are refused at once.
  EXPECT_EQ(code_of([] { read_file_bytes("/dev/zero"); }), ErrorCode::invalid_argument);
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  EXPECT_EQ(code_of([&] { read_file_bytes(path("fifo")); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { read_npy(path("fifo")); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { read_file_bytes(path("missing")); }), ErrorCode::not_found);
  try {
    read_file_bytes("/dev/zero");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/zero"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("character device"), std::string::npos) << e.what();
  }
}

TEST_F(FileIo, ErrorsWithAddedContextNameTheCodeOnce) {
  write_file_atomic(path("bad.npy"), bytes("not a numpy file at all"));
  try {
    read_npy(path("bad.npy"));
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find("corrupt_input: "), 0u) << m;
    EXPECT_EQ(m.find("corrupt_input", 1), std::string::npos) << m;
    EXPECT_NE(m.find(path("bad.npy")), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace cachegen
