#include "cachegen/store.h"

#include "cachegen/error.h"
#include "store/store_key.h"

namespace cachegen {

std::vector<uint8_t> Store::get(std::string_view key) {
  auto value = try_get(key);
  if (!value) {
    throw Error(ErrorCode::not_found,
                "no value under key " + store_detail::printable_key(key) + " in " + url());
  }
  return std::move(*value);
}

}  // namespace cachegen
