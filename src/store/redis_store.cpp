// RedisStore: values in Redis, laid out as described in redis_manifest.h.
#include <hiredis/hiredis.h>
#include <xxhash.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "cachegen/error.h"
#include "cachegen/store.h"
#include "store/random_id.h"
#include "store/redis_connection.h"
#include "store/redis_manifest.h"
#include "store/store_key.h"

namespace cachegen {
namespace {

using namespace store_detail;

// Swaps in a new manifest (KEYS[1] := ARGV[1]) and returns the first bytes of the old one (""
// when there was none), atomically, so that exactly one writer learns of each displaced
// generation and deletes it. KEYS[2..] are the new generation's parts, written with an expiry:
// they are made persistent in the same step (a writer killed before it leaves nothing for
// good), and if one has already expired the manifest is left alone.
constexpr std::string_view kSwapScript =
    "for i = 2, #KEYS do\n"
    "  if redis.call('EXISTS', KEYS[i]) == 0 then\n"
    "    return redis.error_reply('ERR part ' .. (i - 2) .. ' expired before the manifest was "
    "written (pending_part_ttl_ms)')\n"
    "  end\n"
    "end\n"
    "for i = 2, #KEYS do redis.call('PERSIST', KEYS[i]) end\n"
    "local old = redis.call('GETRANGE', KEYS[1], 0, 73)\n"
    "redis.call('SET', KEYS[1], ARGV[1])\n"
    "return old\n";
// gc of one generation: KEYS[1] = the manifest, KEYS[2..] = parts of generation ARGV[1] (16
// hex digits). Unless the manifest names that generation, deletes the parts without expiry and
// counts those with one. Returns {removed, expiring}.
constexpr std::string_view kGcScript =
    "local h = redis.call('GETRANGE', KEYS[1], 0, 73)\n"
    "if string.sub(h, 1, 5) == 'CGS1 ' and string.sub(h, 6, 21) == ARGV[1] then\n"
    "  return {0, 0}\n"
    "end\n"
    "local removed, expiring = 0, 0\n"
    "for i = 2, #KEYS do\n"
    "  local ttl = redis.call('PTTL', KEYS[i])\n"
    "  if ttl == -1 then\n"
    "    redis.call('UNLINK', KEYS[i])\n"
    "    removed = removed + 1\n"
    "  elseif ttl >= 0 then\n"
    "    expiring = expiring + 1\n"
    "  end\n"
    "end\n"
    "return {removed, expiring}\n";
constexpr std::string_view kRemoveScript =
    "local old = redis.call('GETRANGE', KEYS[1], 0, 73)\n"
    "redis.call('DEL', KEYS[1])\n"
    "return old\n";

constexpr size_t kMaxPartBytes = size_t{512} << 20;  // Redis's default proto-max-bulk-len
constexpr int kMaxReadAttempts = 8;                  // reads restarted by concurrent overwrites
constexpr size_t kUnlinkBatch = 256;
constexpr uint64_t kReplySlack = 64;  // a bulk reply's framing ("$<length>\r\n...\r\n")
// Sets a millisecond expiry (ARGV[1]) on every key given.
constexpr std::string_view kExpireScript =
    "for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ARGV[1]) end\n"
    "return 0\n";

std::string_view as_chars(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

std::string_view reply_string(const Reply& r, const char* command) {
  if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS) {
    throw Error(ErrorCode::io_error, std::string("RedisStore: unexpected reply type ") +
                                         std::to_string(r->type) + " to " + command);
  }
  return {r->str, r->len};
}

// Escapes Redis glob metacharacters so that `text` matches itself literally in SCAN MATCH.
std::string glob_literal(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

class RedisStore final : public Store {
 public:
  RedisStore(std::string host, int port, int db, const RedisStoreOptions& options)
      : options_(options),
        conn_(std::move(host), port, db, options.connect_timeout_ms, options.command_timeout_ms,
              options.username, options.password) {
    conn_.ensure_connected();
  }

  void put(std::string_view key, std::span<const uint8_t> value) override {
    check_store_key(key);
    Manifest m;
    m.total_bytes = value.size();
    m.xxh64 = XXH64(value.data(), value.size(), 0);
    if (value.size() > options_.part_bytes) {
      m.part_bytes = static_cast<uint32_t>(options_.part_bytes);
      m.parts = static_cast<uint32_t>((value.size() + m.part_bytes - 1) / m.part_bytes);
    }
    std::lock_guard lock(mu_);
    uint64_t previous_attempt = 0;
    const std::string old_header = with_retry("put", key, [&] {
      if (previous_attempt != 0 && m.parts > 0) {
        // The connection broke during the last attempt: its parts may be orphans, or (if only
        // the swap's reply was lost) the live value. Let them expire after the grace period
        // rather than vanish under a reader, and never leave them behind for good.
        Manifest prev = m;
        prev.generation = previous_attempt;
        delete_parts_of(key, encode_manifest_header(prev), 0,
                        std::max(options_.superseded_grace_ms, 1));
      }
      m.generation = random_u64();  // fresh per attempt: a retry never reuses half-written parts
      previous_attempt = m.generation;
      return write_generation(key, value, m);
    });
    delete_parts_of(key, old_header, m.generation, options_.superseded_grace_ms);
  }

  std::optional<std::vector<uint8_t>> try_get(std::string_view key) override {
    check_store_key(key);
    std::lock_guard lock(mu_);
    return with_retry("get", key, [&] { return read_value(key); });
  }

  bool exists(std::string_view key) override {
    check_store_key(key);
    std::lock_guard lock(mu_);
    return with_retry("exists", key, [&] {
      Reply r = conn_.command({"EXISTS", manifest_key(key)});
      return r->type == REDIS_REPLY_INTEGER && r->integer > 0;
    });
  }

  bool remove(std::string_view key) override {
    check_store_key(key);
    std::lock_guard lock(mu_);
    const std::string old_header = with_retry("remove", key, [&] {
      Reply r = conn_.command({"EVAL", kRemoveScript, "1", manifest_key(key)});
      return std::string(reply_string(r, "EVAL"));
    });
    delete_parts_of(key, old_header, 0, options_.superseded_grace_ms);
    return !old_header.empty();
  }

  std::vector<std::string> list(std::string_view prefix) override {
    std::lock_guard lock(mu_);
    return with_retry("list", prefix, [&] {
      const std::string pattern = glob_literal(manifest_key(prefix)) + "*";
      const size_t skip = manifest_key("").size();
      std::vector<std::string> keys;
      std::string cursor = "0";
      do {
        Reply r = conn_.command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
          throw Error(ErrorCode::io_error, "RedisStore: malformed reply to SCAN");
        }
        cursor.assign(r->element[0]->str, r->element[0]->len);
        for (size_t i = 0; i < r->element[1]->elements; ++i) {
          const redisReply* e = r->element[1]->element[i];
          std::string_view k(e->str, e->len);
          if (k.size() > skip && k.substr(skip).starts_with(prefix))
            keys.emplace_back(k.substr(skip));
        }
      } while (cursor != "0");
      // SCAN may return a key more than once.
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      return keys;
    });
  }

  std::string url() const override { return conn_.url(); }

  GcResult gc(std::chrono::milliseconds) override {
    // Parts carry an expiry from their SET until the swap persists them, so an unnamed part
    // without one was left by a writer from before that rule (or whose server lost the
    // expiry); either way no put in progress needs it. The check and the delete are one script
    // per generation, atomic against a concurrent swap.
    std::lock_guard lock(mu_);
    return with_retry("gc", "", [&] {
      std::map<std::pair<std::string, std::string>, std::vector<std::string>> generations;
      std::string cursor = "0";
      do {
        Reply r = conn_.command({"SCAN", cursor, "MATCH", "cgs:p:*", "COUNT", "1000"});
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
          throw Error(ErrorCode::io_error, "RedisStore: malformed reply to SCAN");
        }
        cursor.assign(r->element[0]->str, r->element[0]->len);
        for (size_t i = 0; i < r->element[1]->elements; ++i) {
          const redisReply* e = r->element[1]->element[i];
          const std::string_view k(e->str, e->len);
          // cgs:p:<key>:<16 hex generation>:<decimal index>
          const size_t last = k.rfind(':');
          if (last == std::string_view::npos || last < 6 + 1 + 17) continue;
          const std::string_view gen = k.substr(last - 16, 16);
          if (k[last - 17] != ':') continue;
          const std::string_view user_key = k.substr(6, last - 17 - 6);
          generations[{std::string(user_key), std::string(gen)}].emplace_back(k);
        }
      } while (cursor != "0");
      GcResult result;
      for (auto& [id, parts] : generations) {
        std::sort(parts.begin(), parts.end());
        parts.erase(std::unique(parts.begin(), parts.end()), parts.end());
        for (size_t first = 0; first < parts.size(); first += kUnlinkBatch) {
          const size_t n = std::min(kUnlinkBatch, parts.size() - first);
          std::vector<std::string_view> args{"EVAL", kGcScript};
          const std::string n_keys = std::to_string(n + 1), mkey = manifest_key(id.first);
          args.push_back(n_keys);
          args.push_back(mkey);
          for (size_t i = first; i < first + n; ++i) args.push_back(parts[i]);
          args.push_back(id.second);
          Reply r = conn_.command(args);
          if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            throw Error(ErrorCode::io_error, "RedisStore: malformed reply to the gc script");
          }
          result.removed += static_cast<size_t>(r->element[0]->integer);
          result.expiring += static_cast<size_t>(r->element[1]->integer);
        }
      }
      return result;
    });
  }

 private:
  // Runs `op` once; if the connection broke, reconnects and runs it once more from the start.
  // Every op is written so that a rerun after a partial first run is harmless.
  template <class Op>
  auto with_retry(const char* what, std::string_view key, Op&& op) -> decltype(op()) {
    for (int attempt = 0;; ++attempt) {
      try {
        conn_.ensure_connected();
        return op();
      } catch (const ConnectionLost& e) {
        if (attempt >= 1) {
          throw Error(ErrorCode::unavailable, "RedisStore: " + std::string(what) + " of key " +
                                                  printable_key(key) +
                                                  " failed after one reconnect: " + e.what());
        }
      }
    }
  }

  // Writes the parts (if any), then swaps the manifest in. Returns the old manifest's header.
  std::string write_generation(std::string_view key, std::span<const uint8_t> value,
                               const Manifest& m) {
    std::string manifest = encode_manifest_header(m);
    if (m.parts == 0) manifest.append(as_chars(value));
    try {
      const std::string ttl = std::to_string(options_.pending_part_ttl_ms);
      std::vector<std::string> swap = {std::string(kSwapScript), std::to_string(m.parts + 1),
                                       manifest_key(key)};
      for (uint32_t i = 0; i < m.parts; ++i) {
        const size_t begin = size_t{i} * m.part_bytes;
        const size_t n = std::min<size_t>(m.part_bytes, value.size() - begin);
        swap.push_back(part_key(key, m.generation, i));
        conn_.command({"SET", swap.back(), as_chars(value.subspan(begin, n)), "PX", ttl});
      }
      swap.push_back(manifest);
      std::vector<std::string_view> args{"EVAL"};
      args.insert(args.end(), swap.begin(), swap.end());
      Reply r = conn_.command(args);
      return std::string(reply_string(r, "EVAL"));
    } catch (const Error&) {
      // The server refused a part or the swap (e.g. out of memory): nothing points at this
      // generation, so drop what was written rather than leave it behind.
      delete_parts_of(key, encode_manifest_header(m), 0);
      throw;
    }
  }

  // Best effort: deletes the parts named by `old_header` unless they belong to `keep` - at once
  // (grace_ms 0), or by expiry after grace_ms so that readers holding the old manifest can
  // finish. Failure leaves only unreachable parts behind, so it is not reported: the put or
  // remove it follows has already taken effect.
  void delete_parts_of(std::string_view key, const std::string& old_header, uint64_t keep,
                       int grace_ms = 0) {
    if (old_header.empty()) return;
    Manifest old;
    try {
      old = parse_manifest_header(old_header, printable_key(key));
    } catch (const Error&) {
      return;  // an unreadable old manifest names no parts we could find
    }
    if (old.parts == 0 || old.generation == keep) return;
    try {
      for (uint32_t first = 0; first < old.parts; first += kUnlinkBatch) {
        const uint32_t n = std::min<uint32_t>(kUnlinkBatch, old.parts - first);
        std::vector<std::string> names;
        if (grace_ms > 0) {
          names = {"EVAL", std::string(kExpireScript), std::to_string(n)};
        } else {
          names = {"UNLINK"};
        }
        for (uint32_t i = first; i < first + n; ++i)
          names.push_back(part_key(key, old.generation, i));
        if (grace_ms > 0) names.push_back(std::to_string(grace_ms));
        conn_.ensure_connected();
        conn_.command(std::vector<std::string_view>(names.begin(), names.end()));
      }
    } catch (const std::exception&) {
    }
  }

  // Whether the manifest no longer names `generation` (overwritten, removed or replaced).
  bool generation_changed(std::string_view key, uint64_t generation) {
    Reply r = conn_.command({"GETRANGE", manifest_key(key), "0", "73"});
    const std::string_view header = reply_string(r, "GETRANGE");
    try {
      return parse_manifest_header(header, printable_key(key)).generation != generation;
    } catch (const Error&) {
      return true;
    }
  }

  std::optional<std::vector<uint8_t>> read_value(std::string_view key) {
    const std::string where = printable_key(key) + " in " + conn_.url();
    auto corrupt = [&](const std::string& what) {
      return Error(ErrorCode::corrupt_input, "RedisStore: value " + where + " " + what);
    };
    const std::string mkey = manifest_key(key);
    for (int attempt = 0; attempt < kMaxReadAttempts; ++attempt) {
      // The header first (a bounded reply), then only as many bytes as it announces.
      Reply h = conn_.command({"GETRANGE", mkey, "0", "73"}, kManifestHeaderBytes + kReplySlack);
      const std::string header(reply_string(h, "GETRANGE"));
      if (header.empty()) return std::nullopt;  // GETRANGE of a missing key is ""
      const Manifest m = parse_manifest_header(header, where);
      if (m.parts == 0 ? m.total_bytes > kMaxPartBytes : m.part_bytes > kMaxPartBytes) {
        throw corrupt("has a manifest announcing " +
                      std::to_string(m.parts == 0 ? m.total_bytes : m.part_bytes) +
                      "-byte strings; no writer makes them over " + std::to_string(kMaxPartBytes));
      }
      std::vector<uint8_t> value;
      if (m.parts == 0) {
        Reply r;
        try {
          r = conn_.command({"GET", mkey}, kManifestHeaderBytes + m.total_bytes + kReplySlack);
        } catch (const ReplyTooLarge&) {
          if (generation_changed(key, m.generation)) continue;  // overwritten meanwhile
          throw;
        }
        if (r->type == REDIS_REPLY_NIL) continue;  // removed meanwhile
        const std::string_view stored = reply_string(r, "GET");
        if (stored.substr(0, kManifestHeaderBytes) != header) continue;  // overwritten meanwhile
        const std::string_view inline_bytes = stored.substr(kManifestHeaderBytes);
        if (inline_bytes.size() != m.total_bytes) {
          throw corrupt("holds " + std::to_string(inline_bytes.size()) +
                        " bytes but its manifest says " + std::to_string(m.total_bytes));
        }
        value.assign(inline_bytes.begin(), inline_bytes.end());
      } else if (!read_parts(key, m, value, corrupt)) {
        continue;  // overwritten or removed while we read; start again from the manifest
      }
      if (XXH64(value.data(), value.size(), 0) != m.xxh64) {
        if (m.parts != 0 && generation_changed(key, m.generation)) continue;
        throw corrupt("fails its XXH64 checksum");
      }
      return value;
    }
    throw Error(ErrorCode::io_error, "RedisStore: value " + where + " was overwritten " +
                                         std::to_string(kMaxReadAttempts) +
                                         " times while being read; giving up");
  }

  // Appends every part of generation m to `value`. Returns false when a part vanished because
  // the manifest moved on; throws corrupt_input when the manifest still names the damaged part.
  template <class Corrupt>
  bool read_parts(std::string_view key, const Manifest& m, std::vector<uint8_t>& value,
                  Corrupt&& corrupt) {
    // Reserve no more than a bounded amount up front: a forged manifest cannot make us
    // allocate what the parts do not actually deliver.
    value.reserve(std::min<uint64_t>(m.total_bytes, uint64_t{256} << 20));
    for (uint32_t i = 0; i < m.parts; ++i) {
      const uint64_t begin = uint64_t{i} * m.part_bytes;
      const uint64_t expected = std::min<uint64_t>(m.part_bytes, m.total_bytes - begin);
      Reply r;
      try {
        r = conn_.command({"GET", part_key(key, m.generation, i)}, expected + kReplySlack);
      } catch (const ReplyTooLarge&) {
        if (generation_changed(key, m.generation)) return false;
        throw;
      }
      const bool missing = r->type == REDIS_REPLY_NIL;
      if (missing || r->type != REDIS_REPLY_STRING || r->len != expected) {
        if (generation_changed(key, m.generation)) return false;
        throw corrupt(missing ? "is missing part " + std::to_string(i) + " of " +
                                    std::to_string(m.parts)
                              : "has part " + std::to_string(i) + " of " + std::to_string(r->len) +
                                    " bytes; expected " + std::to_string(expected));
      }
      value.insert(value.end(), r->str, r->str + r->len);
    }
    return true;
  }

  const RedisStoreOptions options_;
  std::mutex mu_;  // guards conn_: one request/reply in flight at a time
  RedisConnection conn_;
};

}  // namespace

std::unique_ptr<Store> open_redis_store(std::string_view host, int port, int db,
                                        const RedisStoreOptions& options) {
  auto bad = [](const std::string& what) { return Error(ErrorCode::invalid_argument, what); };
  if (host.empty()) throw bad("RedisStore: host is empty");
  if (port < 1 || port > 65535)
    throw bad("RedisStore: port " + std::to_string(port) + " is not in 1..65535");
  if (db < 0) throw bad("RedisStore: database " + std::to_string(db) + " is negative");
  if (options.part_bytes < 1 || options.part_bytes > kMaxPartBytes) {
    throw bad("RedisStore: part_bytes " + std::to_string(options.part_bytes) + " is not in 1.." +
              std::to_string(kMaxPartBytes));
  }
  if (options.pending_part_ttl_ms < 1) throw bad("RedisStore: pending_part_ttl_ms must be >= 1");
  if (options.connect_timeout_ms < 1 || options.command_timeout_ms < 1) {
    throw bad("RedisStore: timeouts must be at least 1 ms");
  }
  return std::make_unique<RedisStore>(std::string(host), port, db, options);
}

}  // namespace cachegen
