// .npy parsing and writing. The header is a Python dict literal; we accept exactly the
// keys numpy writes ('descr', 'fortran_order', 'shape') and reject everything else.
#include "cachegen/npy.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <string_view>

#include "cachegen/error.h"
#include "core/checks.h"
#include "core/huge_pages.h"
#include "core/input_file.h"
#include "core/wire.h"

namespace cachegen {
namespace {

constexpr size_t kMaxHeaderBytes = 1 << 16;
constexpr size_t kMaxDims = 32;

size_t element_count(std::span<const size_t> shape) {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  return n;
}

[[noreturn]] void corrupt(const std::string& m) {
  throw Error(ErrorCode::corrupt_input, "npy: " + m);
}

struct DTypeName {
  std::string_view descr;
  NpyDType type;
};
constexpr DTypeName kDTypes[] = {{"|u1", NpyDType::u8},   {"<u1", NpyDType::u8},
                                 {"<i2", NpyDType::i16},  {"<i4", NpyDType::i32},
                                 {"<i8", NpyDType::i64},  {"<f2", NpyDType::f16},
                                 {"<V2", NpyDType::bf16}, {"bfloat16", NpyDType::bf16},
                                 {"<f4", NpyDType::f32},  {"<f8", NpyDType::f64}};

// Minimal tokenizer over the header dict.
struct Cursor {
  std::string_view s;
  size_t i = 0;
  void skip_ws() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  }
  bool eat(char c) {
    skip_ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c))
      corrupt(std::string("header: expected '") + c + "' at offset " + std::to_string(i));
  }
  std::string_view quoted() {
    skip_ws();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) corrupt("header: expected a string");
    const char q = s[i++];
    const size_t start = i;
    while (i < s.size() && s[i] != q) ++i;
    if (i >= s.size()) corrupt("header: unterminated string");
    return s.substr(start, i++ - start);
  }
  size_t integer() {
    skip_ws();
    size_t v = 0, digits = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      if (v > (SIZE_MAX - 9) / 10) corrupt("header: shape value too large");
      v = v * 10 + static_cast<size_t>(s[i++] - '0');
      ++digits;
    }
    if (digits == 0) corrupt("header: expected an integer at offset " + std::to_string(i));
    if (i < s.size() && s[i] == 'L') ++i;
    return v;
  }
};

}  // namespace

size_t npy_dtype_size(NpyDType t) noexcept {
  switch (t) {
    case NpyDType::u8:
      return 1;
    case NpyDType::i16:
    case NpyDType::f16:
    case NpyDType::bf16:
      return 2;
    case NpyDType::i32:
    case NpyDType::f32:
      return 4;
    case NpyDType::i64:
    case NpyDType::f64:
      return 8;
  }
  return 1;
}

const char* npy_descr(NpyDType t) noexcept {
  switch (t) {
    case NpyDType::u8:
      return "|u1";
    case NpyDType::i16:
      return "<i2";
    case NpyDType::i32:
      return "<i4";
    case NpyDType::i64:
      return "<i8";
    case NpyDType::f16:
      return "<f2";
    case NpyDType::bf16:
      return "<V2";
    case NpyDType::f32:
      return "<f4";
    case NpyDType::f64:
      return "<f8";
  }
  return "|u1";
}

size_t NpyArray::size() const noexcept {
  return element_count(shape);
}

void NpyArray::check_element_size(size_t bytes) const {
  if (bytes != npy_dtype_size(dtype)) {
    throw Error(ErrorCode::invalid_argument, std::string("npy: array dtype ") + npy_descr(dtype) +
                                                 " has " + std::to_string(npy_dtype_size(dtype)) +
                                                 "-byte elements, not " + std::to_string(bytes));
  }
}

namespace {

// Parses the magic and header of b (which may hold only a prefix of the data) into a (dtype
// and shape); returns where the data starts and how many bytes it holds.
size_t parse_npy_header(std::span<const uint8_t> b, NpyArray& a, size_t& bytes) {
  wire::Reader r(b, "npy");
  static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  const auto m = r.take(std::min<size_t>(6, b.size()), "magic");
  if (!std::equal(m.begin(), m.end(), magic)) corrupt("bad magic (not a .npy file)");
  r.need(6 - m.size(), "magic");
  const uint8_t major = r.u8("major version");
  r.u8("minor version");
  if (major < 1 || major > 3) {
    throw Error(ErrorCode::unsupported_version, "npy: format version " + std::to_string(major));
  }
  const size_t header_len = major == 1 ? r.u16("header length") : r.u32("header length");
  if (header_len > kMaxHeaderBytes)
    corrupt("header length " + std::to_string(header_len) + " exceeds limit");
  const size_t header_start = r.position();
  const auto header = r.take(header_len, "header");
  Cursor cur{std::string_view(reinterpret_cast<const char*>(header.data()), header.size())};

  bool have_descr = false, have_order = false, have_shape = false;
  cur.expect('{');
  while (!cur.eat('}')) {
    const std::string_view key = cur.quoted();
    cur.expect(':');
    if ((key == "descr" && have_descr) || (key == "fortran_order" && have_order) ||
        (key == "shape" && have_shape)) {
      corrupt("header repeats key '" + std::string(key) + "'");
    }
    if (key == "descr") {
      const std::string_view d = cur.quoted();
      bool found = false;
      for (const DTypeName& t : kDTypes) {
        if (t.descr == d) {
          a.dtype = t.type;
          found = true;
        }
      }
      if (!found) corrupt("unsupported dtype '" + std::string(d) + "'");
      have_descr = true;
    } else if (key == "fortran_order") {
      cur.skip_ws();
      if (cur.s.substr(cur.i, 5) == "False") {
        cur.i += 5;
      } else {
        corrupt("fortran_order arrays are not supported");
      }
      have_order = true;
    } else if (key == "shape") {
      cur.expect('(');
      while (!cur.eat(')')) {
        if (a.shape.size() >= kMaxDims) corrupt("more than 32 dimensions");
        a.shape.push_back(cur.integer());
        if (!cur.eat(',')) {
          cur.expect(')');
          break;
        }
      }
      have_shape = true;
    } else {
      corrupt("unexpected header key '" + std::string(key) + "'");
    }
    if (!cur.eat(',')) {
      cur.expect('}');
      break;
    }
  }
  if (!have_descr || !have_order || !have_shape)
    corrupt("header lacks descr, fortran_order or shape");
  size_t n = 1;
  for (size_t d : a.shape) {
    if (__builtin_mul_overflow(n, d, &n)) corrupt("shape's element count overflows");
  }
  if (__builtin_mul_overflow(n, npy_dtype_size(a.dtype), &bytes)) corrupt("data size overflows");
  return header_start + header_len;
}

// The data after the header must be exactly the shape's bytes.
void check_data_size(uint64_t available, size_t bytes) {
  if (available < bytes) {
    throw Error(ErrorCode::truncated_input, "npy: data holds " + std::to_string(available) +
                                                " bytes, shape needs " + std::to_string(bytes));
  }
  if (available > bytes) corrupt("trailing bytes after the array data");
}

}  // namespace

NpyArray parse_npy(std::span<const uint8_t> b) {
  NpyArray a;
  size_t bytes = 0;
  const size_t data_start = parse_npy_header(b, a, bytes);
  check_data_size(b.size() - data_start, bytes);
  a.data.assign(b.begin() + static_cast<ptrdiff_t>(data_start), b.end());
  return a;
}

namespace {

// A file's header (from `prefix`, its first bytes) parsed into a and checked against the file's
// size; returns where the data starts (its byte count in `bytes`). Errors name the file.
size_t parse_file_header(std::span<const uint8_t> prefix, uint64_t file_size,
                         const std::string& path, NpyArray& a, size_t& bytes) {
  try {
    const size_t data_start = parse_npy_header(prefix, a, bytes);
    check_data_size(file_size - data_start, bytes);
    return data_start;
  } catch (const Error& e) {
    throw Error(e.code(), e.message() + " (in '" + path + "')");
  }
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  // The header from a prefix, then the data read straight into the array (no second copy of
  // a file that can be gigabytes).
  uint64_t size = 0;
  const int fd = detail::open_regular_input(path, size);
  try {
    NpyArray a;
    std::vector<uint8_t> prefix(
        static_cast<size_t>(std::min<uint64_t>(size, 12 + kMaxHeaderBytes)));
    detail::read_exact(fd, 0, prefix, path);
    size_t bytes = 0;
    const size_t data_start = parse_file_header(prefix, size, path, a, bytes);
    detail::resize_huge(a.data, bytes);
    detail::read_exact(fd, data_start, a.data, path);
    ::close(fd);
    return a;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

size_t MappedNpy::size() const noexcept {
  return element_count(shape);
}

MappedNpy MappedNpy::open(const std::string& path) {
  auto file = std::make_shared<detail::MappedFile>(path);
  const std::span<const uint8_t> b = file->bytes();
  NpyArray header;
  size_t bytes = 0;
  const size_t data_start = parse_file_header(
      b.first(std::min<size_t>(b.size(), 12 + kMaxHeaderBytes)), b.size(), path, header, bytes);
  MappedNpy m;
  m.dtype = header.dtype;
  m.shape = std::move(header.shape);
  if (data_start % npy_dtype_size(m.dtype) == 0) {
    m.data_ = b.subspan(data_start, bytes);
    m.owner_ = std::move(file);
  } else {  // typed views of the data need it aligned
    auto copy = std::make_shared<std::vector<uint8_t>>(b.begin() + data_start, b.end());
    m.data_ = *copy;
    m.owner_ = std::move(copy);
  }
  return m;
}

void exit_on_truncated_input(int exit_code) noexcept {
  detail::exit_on_truncated_mapping(exit_code);
}

std::vector<uint8_t> npy_header(NpyDType dtype, std::span<const size_t> shape) {
  size_t n = 1;
  for (size_t d : shape) n = detail::checked_mul(n, d, "npy shape");
  detail::checked_mul(n, npy_dtype_size(dtype), "npy data size");
  std::string h =
      std::string("{'descr': '") + npy_descr(dtype) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    h += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) h += ",";
    if (i + 1 < shape.size()) h += " ";
  }
  h += "), }";
  const size_t unpadded = 10 + h.size() + 1;  // preamble + header + '\n'
  h.append((64 - unpadded % 64) % 64, ' ');
  h += '\n';
  if (h.size() > 65535) throw Error(ErrorCode::invalid_argument, "npy: header too long");
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.push_back(static_cast<uint8_t>(h.size() & 0xff));
  out.push_back(static_cast<uint8_t>(h.size() >> 8));
  out.insert(out.end(), h.begin(), h.end());
  return out;
}

std::vector<uint8_t> serialize_npy(const NpyArray& a) {
  size_t n = 1;
  for (size_t d : a.shape) n = detail::checked_mul(n, d, "npy shape");
  if (detail::checked_mul(n, npy_dtype_size(a.dtype), "npy data size") != a.data.size()) {
    throw Error(ErrorCode::invalid_argument, "npy: data size does not match shape and dtype");
  }
  std::vector<uint8_t> out = npy_header(a.dtype, a.shape);
  out.insert(out.end(), a.data.begin(), a.data.end());
  return out;
}

void write_npy(const std::string& path, const NpyArray& a) {
  write_file_atomic(path, serialize_npy(a));
}

}  // namespace cachegen
