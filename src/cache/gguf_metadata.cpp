// GGUF metadata: the model shape a cache needs, and a hash identifying the model. Only the
// header and key/value section are read, through a bounded streaming reader (model files can
// be gigabytes; their metadata holds large tokenizer arrays that are skipped, not loaded).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>

#include "cachegen/error.h"
#include "cachegen/kv_cache.h"
#include "core/wire.h"

namespace cachegen {
namespace {

constexpr uint64_t kMaxKeyBytes = 1 << 16;
constexpr uint64_t kMaxStringBytes = 1 << 24;
constexpr uint64_t kMaxKv = 1 << 20;
constexpr uint64_t kMaxArray = uint64_t{1} << 32;

[[noreturn]] void corrupt(const std::string& path, const std::string& m) {
  throw Error(ErrorCode::corrupt_input, "gguf '" + path + "': " + m);
}

class Reader {
 public:
  explicit Reader(const std::string& path)
      : path_(path), f_(std::fopen(path.c_str(), "rb"), &std::fclose) {
    if (!f_)
      throw Error(ErrorCode::not_found,
                  "cannot open model '" + path + "': " + std::strerror(errno));
    XXH64_reset(&hash_, 0);
  }
  void read(void* dst, size_t n) {
    if (std::fread(dst, 1, n, f_.get()) != n) {
      throw Error(ErrorCode::truncated_input,
                  "gguf '" + path_ + "': file ends inside its metadata (a " + std::to_string(n) +
                      "-byte field at offset " + std::to_string(offset_) + ")");
    }
    offset_ += n;
    XXH64_update(&hash_, dst, n);
  }
  void skip(uint64_t n) {
    char buf[4096];
    while (n > 0) {
      const size_t k = n < sizeof buf ? static_cast<size_t>(n) : sizeof buf;
      read(buf, k);
      n -= k;
    }
  }
  // A little-endian integer (GGUF's byte order), decoded by the shared wire layer.
  template <typename T>
  T pod() {
    static_assert(std::is_integral_v<T> && sizeof(T) <= 8);
    uint8_t b[sizeof(T)];
    read(b, sizeof b);
    return static_cast<T>(wire::load_le(b, sizeof b));
  }
  std::string str(uint64_t limit, const char* what) {
    const uint64_t n = pod<uint64_t>();
    if (n > limit)
      corrupt(path_, std::string(what) + " length " + std::to_string(n) + " exceeds limit");
    std::string s(n, '\0');
    read(s.data(), n);
    return s;
  }
  uint64_t hash() { return XXH64_digest(&hash_); }

 private:
  std::string path_;
  std::unique_ptr<FILE, int (*)(FILE*)> f_;
  uint64_t offset_ = 0;
  XXH64_state_t hash_;
};

using Value = std::variant<int64_t, std::string, std::vector<int64_t>>;

size_t scalar_size(uint32_t type) {
  switch (type) {
    case 0:
    case 1:
    case 7:
      return 1;
    case 2:
    case 3:
      return 2;
    case 4:
    case 5:
    case 6:
      return 4;
    case 10:
    case 11:
    case 12:
      return 8;
    default:
      return 0;
  }
}

// Integer value of an integer-typed scalar (others -> nullopt-like flag).
bool read_int(Reader& r, uint32_t type, int64_t& out) {
  switch (type) {
    case 0:
      out = r.pod<uint8_t>();
      return true;
    case 1:
      out = r.pod<int8_t>();
      return true;
    case 2:
      out = r.pod<uint16_t>();
      return true;
    case 3:
      out = r.pod<int16_t>();
      return true;
    case 4:
      out = r.pod<uint32_t>();
      return true;
    case 5:
      out = r.pod<int32_t>();
      return true;
    case 10:
      out = static_cast<int64_t>(r.pod<uint64_t>());
      return true;
    case 11:
      out = r.pod<int64_t>();
      return true;
    default:
      return false;
  }
}

struct Metadata {
  std::map<std::string, Value> kv;
  uint64_t hash = 0;
};

Metadata read_metadata(const std::string& path) {
  Reader r(path);
  char magic[4];
  r.read(magic, 4);
  if (std::memcmp(magic, "GGUF", 4) != 0) corrupt(path, "bad magic (not a GGUF file)");
  const uint32_t version = r.pod<uint32_t>();
  if (version < 2 || version > 3) {
    throw Error(ErrorCode::unsupported_version,
                "gguf '" + path + "': version " + std::to_string(version));
  }
  r.pod<uint64_t>();  // tensor count
  const uint64_t n_kv = r.pod<uint64_t>();
  if (n_kv > kMaxKv) corrupt(path, "metadata count " + std::to_string(n_kv) + " exceeds limit");
  Metadata md;
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = r.str(kMaxKeyBytes, "key");
    const uint32_t type = r.pod<uint32_t>();
    int64_t iv;
    if (type == 8) {
      md.kv[key] = r.str(kMaxStringBytes, "string value");
    } else if (type == 9) {
      const uint32_t et = r.pod<uint32_t>();
      const uint64_t n = r.pod<uint64_t>();
      if (n > kMaxArray) corrupt(path, "array '" + key + "' too long");
      if (et == 8) {  // string arrays (the tokenizer's vocabulary): skipped
        for (uint64_t j = 0; j < n; ++j) {
          const uint64_t len = r.pod<uint64_t>();
          if (len > kMaxStringBytes) corrupt(path, "string in array '" + key + "' too long");
          r.skip(len);
        }
        continue;
      }
      const size_t es = scalar_size(et);
      if (es == 0) corrupt(path, "array '" + key + "' has element type " + std::to_string(et));
      if (n <= 4096 && et != 6 && et != 12 && et != 7) {
        std::vector<int64_t> v(n);
        for (auto& x : v) read_int(r, et, x);
        md.kv[key] = std::move(v);
      } else {
        r.skip(n * es);
      }
    } else if (read_int(r, type, iv)) {
      md.kv[key] = iv;
    } else if (scalar_size(type) != 0) {
      r.skip(scalar_size(type));
    } else {
      corrupt(path, "key '" + key + "' has value type " + std::to_string(type));
    }
  }
  md.hash = r.hash();
  return md;
}

}  // namespace

ModelShape ModelShape::from_gguf(const std::string& path) {
  const Metadata md = read_metadata(path);
  auto get_str = [&](const std::string& k) -> std::string {
    auto it = md.kv.find(k);
    if (it == md.kv.end() || !std::holds_alternative<std::string>(it->second)) {
      corrupt(path, "missing string key '" + k + "'");
    }
    return std::get<std::string>(it->second);
  };
  auto get_int = [&](const std::string& k, bool required) -> int64_t {
    auto it = md.kv.find(k);
    if (it == md.kv.end() || !std::holds_alternative<int64_t>(it->second)) {
      if (required) corrupt(path, "missing integer key '" + k + "'");
      return -1;
    }
    return std::get<int64_t>(it->second);
  };
  ModelShape s;
  s.architecture = get_str("general.architecture");
  const std::string a = s.architecture;
  const int64_t n_layers = get_int(a + ".block_count", true);
  if (n_layers < 1 || n_layers > 4096) corrupt(path, "block_count " + std::to_string(n_layers));
  s.n_layers = static_cast<int>(n_layers);
  const int64_t n_head = get_int(a + ".attention.head_count", true);
  // head_count_kv: a scalar, a per-layer array (0 = a layer without attention), or absent
  // (= head_count).
  int64_t n_kv = n_head;
  auto kv_it = md.kv.find(a + ".attention.head_count_kv");
  if (kv_it != md.kv.end()) {
    if (std::holds_alternative<int64_t>(kv_it->second)) {
      n_kv = std::get<int64_t>(kv_it->second);
    } else if (std::holds_alternative<std::vector<int64_t>>(kv_it->second)) {
      const auto& v = std::get<std::vector<int64_t>>(kv_it->second);
      if (v.size() != static_cast<size_t>(n_layers)) corrupt(path, "head_count_kv array length");
      n_kv = 0;
      for (int64_t x : v) {
        s.attention.push_back(x > 0);
        if (x > 0 && n_kv > 0 && x != n_kv)
          corrupt(path, "layers with different KV head counts are not supported");
        if (x > 0) n_kv = x;
      }
    }
  }
  int64_t head_dim = get_int(a + ".attention.key_length", false);
  if (head_dim <= 0) {
    const int64_t embd = get_int(a + ".embedding_length", true);
    if (n_head <= 0 || embd % n_head != 0)
      corrupt(path, "embedding_length is not a multiple of head_count");
    head_dim = embd / n_head;
  }
  if (n_kv < 1 || n_kv > 65536 || head_dim < 1 || head_dim > 65536) {
    corrupt(path, "implausible KV heads " + std::to_string(n_kv) + " / head_dim " +
                      std::to_string(head_dim));
  }
  s.n_kv_heads = static_cast<int>(n_kv);
  s.head_dim = static_cast<int>(head_dim);
  s.validate();
  return s;
}

uint64_t gguf_metadata_hash(const std::string& path) {
  return read_metadata(path).hash;
}

}  // namespace cachegen
