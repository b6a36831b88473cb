// Key rules shared by every store, and the key <-> file name mapping used by FileStore.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cachegen::store_detail {

// `key` quoted for an error message: control and non-ASCII bytes as \xNN, long keys shortened.
std::string printable_key(std::string_view key);

// The file name FileStore uses for a valid key: bytes in [A-Za-z0-9._-] kept, every other byte
// and a leading '.' written as %XX (uppercase hex). Injective, never empty, never starts with
// '.', never contains '/', so it cannot name "..", a hidden temp file or another directory.
std::string key_to_file_name(std::string_view key);

// Inverse of key_to_file_name; std::nullopt for names it never produces (temp files, foreign
// files, lower-case or malformed escapes), so that each key has exactly one file name.
std::optional<std::string> file_name_to_key(std::string_view name);

}  // namespace cachegen::store_detail
