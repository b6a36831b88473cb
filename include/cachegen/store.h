// cachegen: key-value stores for compressed KV caches.
//
// A Store maps keys to byte values of any size. Two back ends share one contract:
//   FileStore  - a local directory (the default, embedded; no server needed);
//   RedisStore - a Redis server reached through hiredis.
// Open either through open_store(url).
//
// Contract common to every Store:
//   * Values are opaque, binary-safe bytes (NULs allowed), from 0 bytes up to what the back end
//     holds. A get() returns exactly the bytes of one complete put(): never a prefix, never a mix
//     of two concurrent puts, never a value whose parts or checksum do not verify.
//   * Keys: 1..kMaxStoreKeyBytes bytes; no NUL and no other control byte (0x00-0x1F, 0x7F).
//     Any other byte, including '/', '.', ':' and UTF-8, is allowed; check_store_key() names the
//     rule a key breaks. FileStore also needs the key's escaped file name (see below) to fit in
//     255 bytes, so keys with many bytes outside [A-Za-z0-9._-] may be rejected there.
//   * Errors are cachegen::Error: invalid_argument (bad key or URL), not_found (get() of a
//     missing key), corrupt_input (stored bytes fail verification), io_error (the OS or the
//     server refused an operation), unavailable (the server cannot be reached).
//   * Thread safety: every Store method may be called concurrently from several threads on one
//     object. FileStore is lock-free (each call is independent); RedisStore serialises calls on
//     its single connection with a mutex, so open one RedisStore per thread for parallel I/O.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cachegen {

// Longest key any Store accepts, in bytes.
inline constexpr size_t kMaxStoreKeyBytes = 255;

// Throws Error(invalid_argument) naming the rule `key` breaks (empty, too long, control byte).
void check_store_key(std::string_view key);

class Store {
 public:
  virtual ~Store() = default;

  // Stores `value` under `key`, replacing any previous value atomically: a concurrent reader
  // sees either the old value or the new one, whole.
  virtual void put(std::string_view key, std::span<const uint8_t> value) = 0;

  // The value stored under `key`, or std::nullopt when there is none.
  // Throws corrupt_input when stored bytes exist but fail verification.
  virtual std::optional<std::vector<uint8_t>> try_get(std::string_view key) = 0;

  // Like try_get() but a missing key throws Error(not_found) naming the key and the store.
  std::vector<uint8_t> get(std::string_view key);

  // Whether a value is stored under `key` (a get() may still report corrupt_input).
  virtual bool exists(std::string_view key) = 0;

  // Deletes `key`; returns false when it did not exist.
  virtual bool remove(std::string_view key) = 0;

  // Every key starting with `prefix` (all keys when empty), sorted bytewise ascending.
  // Keys written or removed concurrently may or may not appear.
  virtual std::vector<std::string> list(std::string_view prefix = {}) = 0;

  // A URL describing this store, e.g. "file:///var/cache/kv" or "redis://127.0.0.1:6379/0".
  virtual std::string url() const = 0;

  struct GcResult {
    size_t removed = 0;   // leftovers deleted now
    size_t expiring = 0;  // leftovers that already carry an expiry (Redis), left to expire
  };
  // Removes what writers that crashed or were killed left behind, never a value a get() could
  // return and never what a put() still in progress needs: FileStore deletes its ".tmp-*" files
  // last modified more than `grace` ago; RedisStore deletes parts that no manifest names and
  // that carry no expiry (parts written by a put carry one until its manifest commits them;
  // such parts are counted in `expiring`). Safe to run while other clients read and write.
  virtual GcResult gc(std::chrono::milliseconds grace = std::chrono::hours(1)) = 0;
};

// Opens a store from a URL:
//   file://DIR or a plain path DIR  -> FileStore on DIR (created, with parents, if missing);
//                                      "file:///abs/dir" is absolute, "file://rel/dir" relative.
//   redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]
//                                   -> RedisStore (PORT defaults to 6379, DB to 0; HOST may be
//                                      an IPv6 literal in brackets; USER and PASSWORD may use
//                                      %XX escapes). Without a password in the URL, the
//                                      environment variable CACHEGEN_REDIS_PASSWORD supplies
//                                      one if set. Connects (and authenticates) immediately.
// A plain path may not contain ':' (write file://PATH): "redis:/h" is a mistyped URL, not a
// directory. Throws invalid_argument naming what is wrong with a malformed URL, io_error when
// DIR cannot be created, unavailable when the Redis server cannot be reached.
//
// StoreOpen::existing (for readers: get, list, verify) never creates DIR: a missing one is
// not_found.
enum class StoreOpen : uint8_t { create, existing };
std::unique_ptr<Store> open_store(std::string_view url, StoreOpen open = StoreOpen::create);

// FileStore on directory `dir` (created if missing). Layout: one regular file per key, named by
// the key with every byte outside [A-Za-z0-9._-] (and a leading '.') written as %XX (uppercase
// hex). Writes go to a uniquely named ".tmp-*" file in the same directory, are fsync'ed, renamed
// over the final name, and the directory is fsync'ed; names starting with '.' (temp files left
// by a crashed writer) and names that are not valid escapes are ignored by list() and get().
// get() opens values with O_NOFOLLOW: a symbolic link planted in the directory is refused
// (io_error), never followed.
std::unique_ptr<Store> open_file_store(std::string_view dir, StoreOpen open = StoreOpen::create);

struct RedisStoreOptions {
  int connect_timeout_ms = 2000;   // per connection attempt
  int command_timeout_ms = 10000;  // per request/reply; a timeout counts as a broken connection
  size_t part_bytes = 4u << 20;    // values longer than this are split into parts of this size
  // Parts of an overwritten or removed value expire this long after being superseded instead of
  // vanishing at once, so a reader that already holds the old manifest can finish reading it
  // (without this, readers starve under a steady stream of overwrites). 0 = delete at once.
  int superseded_grace_ms = 30000;
  // Parts are written with this expiry and made persistent by the same script that swaps their
  // manifest in, so a writer killed mid-put leaves nothing for good. A put whose parts take
  // longer than this to write fails (io_error) rather than commit expired parts.
  int pending_part_ttl_ms = 3600 * 1000;
  // Sent with AUTH after connecting when password is not empty (username empty: the one-argument
  // AUTH of requirepass). Never part of url() or of any error message.
  std::string username, password;
};

// RedisStore on HOST:PORT, database `db`. Values of up to part_bytes are stored in one Redis
// string next to a small checksummed manifest header; longer values are stored as parts under a
// fresh generation id, and the manifest naming that generation is written last (see
// src/store/redis_manifest.h for the layout). A call whose connection breaks reconnects once and
// retries the whole operation; if that fails too it throws unavailable.
std::unique_ptr<Store> open_redis_store(std::string_view host, int port, int db = 0,
                                        const RedisStoreOptions& options = {});

}  // namespace cachegen
