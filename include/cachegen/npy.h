// cachegen: reading and writing NumPy .npy files (format versions 1.0-3.0, C order,
// little-endian), the interchange format of the CLI and the test data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace cachegen {

enum class NpyDType { u8, i16, i32, i64, f16, bf16, f32, f64 };

// Bytes per element of a dtype.
size_t npy_dtype_size(NpyDType t) noexcept;
// The .npy descr string written for a dtype ("<f2", "|u1", ...; bf16 is written as "<V2"
// with no standard numpy name, and read back from "<V2" or "bfloat16").
const char* npy_descr(NpyDType t) noexcept;

struct NpyArray {
  NpyDType dtype = NpyDType::f32;
  std::vector<size_t> shape;
  std::vector<uint8_t> data;  // raw little-endian elements, C order

  size_t size() const noexcept;  // number of elements (1 for a 0-d array)
  // Typed view of the data; T must match dtype's size (checked).
  template <typename T>
  std::span<const T> as() const {
    check_element_size(sizeof(T));
    return {reinterpret_cast<const T*>(data.data()), data.size() / sizeof(T)};
  }

 private:
  void check_element_size(size_t bytes) const;
};

// Parses a whole .npy file image. Throws Error(corrupt_input / truncated_input /
// unsupported_version) naming the field; sizes are validated against the byte count
// before anything is allocated.
NpyArray parse_npy(std::span<const uint8_t> bytes);
// Reads a file (Error(io_error) / not_found with the path on failure).
NpyArray read_npy(const std::string& path);

// A .npy file's array where it lies: the file mapped read-only and shared with the OS's page
// cache, nothing copied — for large arrays read once (read_npy fills fresh memory: the OS
// zeroes every page, then the file is copied in, ~0.03 s of `cachegen encode`'s ~0.12 s on a
// 128 MiB array, and up to 0.3 s more where the OS compacted memory for its huge pages).
// Validated as read_npy validates; data() stays valid while any copy of the object lives. A
// file whose data is not aligned to its element size (a hand-made header) is read into memory
// instead. If another process truncates the file while it is mapped, reading the lost pages
// raises SIGBUS: an application that cannot rule that out calls exit_on_truncated_input().
class MappedNpy {
 public:
  static MappedNpy open(const std::string& path);
  NpyDType dtype = NpyDType::f32;
  std::vector<size_t> shape;
  size_t size() const noexcept;  // number of elements
  std::span<const uint8_t> data() const noexcept { return data_; }

 private:
  std::shared_ptr<const void> owner_;  // the mapping (or the array read instead)
  std::span<const uint8_t> data_;
};
// A SIGBUS from reading a mapped input (a MappedNpy, or a CgkvReader from map_file) whose file
// was truncated meanwhile then prints an error naming the file and ends the process with
// _exit(exit_code) (the CLI: 5, an I/O failure); any other SIGBUS keeps its default action.
// Installs a process-wide signal handler: for applications, never called by the library itself.
void exit_on_truncated_input(int exit_code) noexcept;

// Serialises to the .npy v1.0 format: npy_header(a.dtype, a.shape), then a.data.
std::vector<uint8_t> serialize_npy(const NpyArray& a);
// The .npy v1.0 header (preamble, dictionary, padding to 64 bytes) of a C-order array; its
// data follows it. For writing an array in pieces (OutputFile::write_at after the header).
std::vector<uint8_t> npy_header(NpyDType dtype, std::span<const size_t> shape);
// Writes as write_file_atomic does.
void write_npy(const std::string& path, const NpyArray& a);

// Whole-file helpers shared by the CLI and the stores.
// Reads a regular file, exactly the size fstat reports. A directory, device, FIFO or socket is
// refused with invalid_argument (opened without blocking); a missing file is not_found; a file
// that shrinks while read is io_error.
std::vector<uint8_t> read_file_bytes(const std::string& path);
// Writes `bytes` to `path`:
//   a regular file or a new name: atomic replace (temp file beside it, fsync, rename; see
//   OutputFile);
//   a symbolic link: its (final) target is replaced atomically, the link stays;
//   a device, FIFO or socket (e.g. /dev/null): written through, never replaced;
//   "-": standard output;
//   a directory: invalid_argument.
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);

// A file written in pieces, in any order, then published at once by commit(), by
// write_file_atomic's rules: a regular file or a new name is written to an unnamed temp file
// in its directory (O_TMPFILE: a writer killed before commit leaves nothing), named and renamed
// over it on commit (a symlink's final target is what gets replaced); a seekable
// device is written through; a FIFO, socket, terminal or "-" (standard output), which can only
// be written in order, is written from an unnamed spill file in $TMPDIR (default /tmp) on
// commit. So memory never holds the whole output. Destroyed without commit(): the temp or spill
// file is removed and nothing at `path` changes (a seekable device keeps what it received).
class OutputFile {
 public:
  explicit OutputFile(const std::string& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Writes `bytes` at `offset` (bytes never written read as zeros).
  void write_at(uint64_t offset, std::span<const uint8_t> bytes);
  // Flushes and publishes the file; the object is done afterwards.
  void commit();

 private:
  enum class Mode { replace, device, spill };
  Mode mode_ = Mode::replace;
  std::string path_;      // where the file goes (the final target of links)
  std::string tmp_;       // Mode::replace: the temp file's name beside path_
  bool unnamed_ = false;  // Mode::replace: an O_TMPFILE file, given the name tmp_ at commit
  int fd_ = -1;           // what write_at writes: temp file, device or spill file
  int target_fd_ = -1;    // Mode::spill: the FIFO, socket, terminal or standard output
  uint64_t size_ = 0;
  bool done_ = false;
};

}  // namespace cachegen
