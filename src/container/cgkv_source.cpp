// Byte sources behind CgkvReader, and the checksums.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t on the stack
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "cachegen/error.h"
#include "container/cgkv_internal.h"
#include "container/xxh3_stream.h"
#include "core/input_file.h"
#include "core/wire.h"

namespace cachegen::detail {
namespace {

class MemorySource final : public CgkvReader::Source {
 public:
  explicit MemorySource(std::vector<uint8_t> b) : b_(std::move(b)) {}
  uint64_t size() const override { return b_.size(); }
  void read_into(uint64_t offset, std::span<uint8_t> out) const override {
    if (!out.empty()) std::memcpy(out.data(), b_.data() + offset, out.size());
  }
  std::span<const uint8_t> view(uint64_t offset, size_t n) const override {
    return {b_.data() + offset, n};
  }

 private:
  std::vector<uint8_t> b_;
};

class FileSource final : public CgkvReader::Source {
 public:
  explicit FileSource(const std::string& path) : path_(path) {
    fd_ = open_regular_input(path, size_);
  }
  ~FileSource() override { ::close(fd_); }
  uint64_t size() const override { return size_; }
  void read_into(uint64_t offset, std::span<uint8_t> out) const override {
    const size_t n = out.size();
    size_t done = 0;
    while (done < n) {
      const ssize_t r =
          ::pread(fd_, out.data() + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        throw Error(r == 0 ? ErrorCode::truncated_input : ErrorCode::io_error,
                    "reading '" + path_ + "' at offset " + std::to_string(offset + done) + ": " +
                        (r == 0 ? std::string("file shrank while open") : std::strerror(errno)));
      }
      done += static_cast<size_t>(r);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A mapped file (MappedFile): in place, as MemorySource.
class MappedSource final : public CgkvReader::Source {
 public:
  explicit MappedSource(const std::string& path) : file_(path) {}
  uint64_t size() const override { return file_.bytes().size(); }
  void read_into(uint64_t offset, std::span<uint8_t> out) const override {
    if (!out.empty()) std::memcpy(out.data(), file_.bytes().data() + offset, out.size());
  }
  std::span<const uint8_t> view(uint64_t offset, size_t n) const override {
    return file_.bytes().subspan(static_cast<size_t>(offset), n);
  }

 private:
  MappedFile file_;
};

}  // namespace

std::shared_ptr<const CgkvReader::Source> mapped_source(const std::string& path) {
  return std::make_shared<MappedSource>(path);
}
std::shared_ptr<const CgkvReader::Source> memory_source(std::vector<uint8_t> bytes) {
  return std::make_shared<MemorySource>(std::move(bytes));
}
std::shared_ptr<const CgkvReader::Source> file_source(const std::string& path) {
  return std::make_shared<FileSource>(path);
}

uint64_t xxh64(std::span<const uint8_t> bytes) {
  return XXH64(bytes.data(), bytes.size(), 0);
}

struct ChunkHash::State {
  Xxh3State xxh3;  // version >= 5
  XXH64_state_t xxh64;
  const Xxh3Kernels* k = nullptr;  // null: XXH64
};

ChunkHash::ChunkHash(uint16_t version, size_t index, const CgkvChunkInfo& chunk)
    : state_(std::make_unique<State>()) {
  if (version >= kCgkvXxh3Version) {
    state_->k = &xxh3_kernels();
    state_->k->reset(state_->xxh3);
  } else {
    XXH64_reset(&state_->xxh64, 0);
  }
  if (version < 2) return;
  uint8_t tag[24];
  const uint64_t fields[3] = {index, chunk.token_begin, chunk.n_tokens};
  for (int f = 0; f < 3; ++f) wire::store_le(tag + 8 * f, fields[f], 8);
  update(tag);
}

ChunkHash::~ChunkHash() = default;

void ChunkHash::update(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return;
  if (state_->k) {
    state_->k->update(state_->xxh3, bytes.data(), bytes.size());
  } else {
    XXH64_update(&state_->xxh64, bytes.data(), bytes.size());
  }
}

uint64_t ChunkHash::digest() const {
  return state_->k ? state_->k->digest(state_->xxh3) : XXH64_digest(&state_->xxh64);
}

uint64_t chunk_checksum(uint16_t version, size_t index, const CgkvChunkInfo& chunk,
                        std::span<const uint8_t> bytes) {
  ChunkHash h(version, index, chunk);
  h.update(bytes);
  return h.digest();
}

}  // namespace cachegen::detail
