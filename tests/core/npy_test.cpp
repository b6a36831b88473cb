// .npy reading and writing; hostile headers give clear errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "cachegen/error.h"
#include "cachegen/npy.h"

namespace cachegen {
namespace {

std::vector<uint8_t> with_header(const std::string& header, size_t data_bytes) {
  const uint8_t preamble[10] = {0x93,
                                'N',
                                'U',
                                'M',
                                'P',
                                'Y',
                                1,
                                0,
                                static_cast<uint8_t>(header.size() & 0xff),
                                static_cast<uint8_t>(header.size() >> 8)};
  std::vector<uint8_t> b(10 + header.size() + data_bytes, 0);
  std::memcpy(b.data(), preamble, 10);
  std::memcpy(b.data() + 10, header.data(), header.size());
  return b;
}

ErrorCode error_of(const std::vector<uint8_t>& b) {
  try {
    parse_npy(b);
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::ok;
}

TEST(Npy, RoundTripEveryDtype) {
  for (NpyDType t : {NpyDType::u8, NpyDType::i16, NpyDType::i32, NpyDType::i64, NpyDType::f16,
                     NpyDType::bf16, NpyDType::f32, NpyDType::f64}) {
    NpyArray a;
    a.dtype = t;
    a.shape = {2, 3, 5};
    a.data.resize(30 * npy_dtype_size(t));
    for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<uint8_t>(i * 31);
    const std::vector<uint8_t> bytes = serialize_npy(a);
    EXPECT_EQ((bytes.size() - a.data.size()) % 64, 0u);
    const NpyArray b = parse_npy(bytes);
    EXPECT_EQ(b.dtype, t);
    EXPECT_EQ(b.shape, a.shape);
    EXPECT_EQ(b.data, a.data);
  }
  NpyArray one;
  one.dtype = NpyDType::f32;
  one.shape = {4};
  one.data.resize(16);
  EXPECT_EQ(parse_npy(serialize_npy(one)).shape, std::vector<size_t>{4});
}

TEST(Npy, FileRoundTripIsAtomic) {
  const std::string path = ::testing::TempDir() + "/cachegen_npy_test.npy";
  NpyArray a;
  a.dtype = NpyDType::u8;
  a.shape = {3};
  a.data = {1, 2, 3};
  write_npy(path, a);
  EXPECT_EQ(read_npy(path).data, a.data);
  std::remove(path.c_str());
  try {
    read_npy(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
}

TEST(Npy, HostileInputsRejected) {
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  EXPECT_EQ(error_of(with_header(ok, 16)), ErrorCode::ok);
  EXPECT_EQ(error_of(with_header(ok, 15)), ErrorCode::truncated_input);
  EXPECT_EQ(error_of(with_header(ok, 17)), ErrorCode::corrupt_input);
  EXPECT_EQ(error_of({}), ErrorCode::truncated_input);
  auto bad_magic = with_header(ok, 16);
  bad_magic[1] = 'X';
  EXPECT_EQ(error_of(bad_magic), ErrorCode::corrupt_input);
  auto bad_version = with_header(ok, 16);
  bad_version[6] = 9;
  EXPECT_EQ(error_of(bad_version), ErrorCode::unsupported_version);
  // A huge shape must fail on size, not allocate.
  EXPECT_EQ(
      error_of(with_header(
          "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }", 0)),
      ErrorCode::corrupt_input);
  EXPECT_EQ(
      error_of(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000,), }", 8)),
      ErrorCode::truncated_input);
  EXPECT_EQ(error_of(with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4)),
            ErrorCode::corrupt_input);
  EXPECT_EQ(error_of(with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", 4)),
            ErrorCode::corrupt_input);
  EXPECT_EQ(error_of(with_header("{'descr': '<f4', 'shape': (1,), }", 4)),
            ErrorCode::corrupt_input);
  EXPECT_EQ(error_of(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,", 4)),
            ErrorCode::corrupt_input);
  EXPECT_EQ(error_of(with_header(
                "{'descr': '<f4', 'shape': (2,), 'fortran_order': False, 'shape': (3,), }", 24)),
            ErrorCode::corrupt_input);
  // A v2 preamble cut inside its 4-byte header length.
  EXPECT_EQ(error_of({0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0}), ErrorCode::truncated_input);
  // Every truncation of a valid file is an error, never a crash.
  const auto full = with_header(ok, 16);
  for (size_t n = 0; n < full.size(); ++n) {
    EXPECT_NE(error_of(std::vector<uint8_t>(full.begin(), full.begin() + n)), ErrorCode::ok) << n;
  }
}

// A mapped array is the array read_npy reads, and a bad file is the same error.
TEST(Npy, MappedIsWhatReadReads) {
  const std::string path = ::testing::TempDir() + "/cachegen_npy_mapped.npy";
  NpyArray a;
  a.dtype = NpyDType::f16;
  a.shape = {3, 5000};  // more than a page
  a.data.resize(2 * 3 * 5000);
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<uint8_t>(i * 7 + 1);
  write_npy(path, a);
  MappedNpy m = MappedNpy::open(path);
  EXPECT_EQ(m.dtype, a.dtype);
  EXPECT_EQ(m.shape, a.shape);
  EXPECT_EQ(m.size(), 15000u);
  EXPECT_EQ(std::vector<uint8_t>(m.data().begin(), m.data().end()), a.data);
  const MappedNpy copy = m;
  m = MappedNpy();  // the copy keeps the mapping
  EXPECT_EQ(std::vector<uint8_t>(copy.data().begin(), copy.data().end()), a.data);
  // A header whose data starts at an odd offset: read into memory, still the same values.
  const std::string odd = "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }";
  auto b = with_header(odd + std::string(odd.size() % 2 == 0 ? 1 : 0, ' '), 6);
  for (size_t i = b.size() - 6; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i);
  write_file_atomic(path, b);
  const MappedNpy odd_m = MappedNpy::open(path);
  EXPECT_EQ(std::vector<uint8_t>(odd_m.data().begin(), odd_m.data().end()),
            std::vector<uint8_t>(b.end() - 6, b.end()));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(odd_m.data().data()) % 2, 0u);
  const auto code_of = [&](const std::vector<uint8_t>& bytes) {
    write_file_atomic(path, bytes);
    ErrorCode read_code = ErrorCode::ok, mapped_code = ErrorCode::ok;
    try {
      read_npy(path);
    } catch (const Error& e) {
      read_code = e.code();
    }
    try {
      MappedNpy::open(path);
    } catch (const Error& e) {
      mapped_code = e.code();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
    EXPECT_EQ(read_code, mapped_code);
    return mapped_code;
  };
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  EXPECT_EQ(code_of(with_header(ok, 16)), ErrorCode::ok);
  EXPECT_EQ(code_of(with_header(ok, 15)), ErrorCode::truncated_input);
  EXPECT_EQ(code_of(with_header(ok, 17)), ErrorCode::corrupt_input);
  EXPECT_EQ(code_of({}), ErrorCode::truncated_input);
  std::remove(path.c_str());
  try {
    MappedNpy::open(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
  }
  try {
    MappedNpy::open(::testing::TempDir());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  }
}

// A file truncated while mapped: reading its lost pages is SIGBUS, which the guard turns into
// an error line and the exit code asked for; other SIGBUS keep the default action.
TEST(NpyDeathTest, TruncatedWhileMapped) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = ::testing::TempDir() + "/cachegen_npy_truncated.npy";
  NpyArray a;
  a.dtype = NpyDType::u8;
  a.shape = {1 << 16};
  a.data.assign(size_t{1} << 16, 3);
  write_npy(path, a);
  const auto read_after_truncation = [&] {
    const MappedNpy m = MappedNpy::open(path);
    if (::truncate(path.c_str(), 0) != 0) std::_Exit(99);
    volatile uint8_t v = m.data()[40000];
    std::_Exit(v == 3 ? 98 : 97);  // not reached: the page is gone
  };
  // Unguarded: killed by SIGBUS (under AddressSanitizer, its own report: exit 1 or abort).
  const auto sigbus_or_sanitizer = [](int status) {
    return WIFSIGNALED(status) ? WTERMSIG(status) == SIGBUS || WTERMSIG(status) == SIGABRT
                               : WIFEXITED(status) && WEXITSTATUS(status) == 1;
  };
  EXPECT_EXIT(read_after_truncation(), sigbus_or_sanitizer, "");
  write_npy(path, a);
  EXPECT_EXIT(
      {
        exit_on_truncated_input(5);
        read_after_truncation();
      },
      ::testing::ExitedWithCode(5), "'" + path + "' was truncated while it was read");
  write_npy(path, a);
  EXPECT_EXIT(
      {
        exit_on_truncated_input(5);
        ::raise(SIGBUS);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace cachegen
