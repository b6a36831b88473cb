// C API over Store (store.h).
#include <memory>

#include "cachegen/cachegen_c.h"
#include "cachegen/store.h"
#include "capi/capi_buffers.h"
#include "capi/capi_status.h"
#include "capi/capi_store.h"

namespace {
using cachegen::capi::guard;
using cachegen::capi::need;
}  // namespace

extern "C" {

int cachegen_store_open(const char* url, int create, cachegen_store** out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    need(url, "url");
    auto s = std::make_unique<cachegen_store>();
    s->store = cachegen::open_store(
        url, create ? cachegen::StoreOpen::create : cachegen::StoreOpen::existing);
    *out = s.release();
  });
}

void cachegen_store_free(cachegen_store* store) {
  delete store;
}

int cachegen_store_url(const cachegen_store* s, char** out_url) {
  return guard([&] {
    need(out_url, "out_url");
    *out_url = nullptr;
    need(s, "store");
    *out_url = cachegen::capi::malloc_strings({s->store->url()});
  });
}

int cachegen_store_put(cachegen_store* s, const char* key, const uint8_t* value, size_t size) {
  return guard([&] {
    need(s, "store");
    need(key, "key");
    if (size) need(value, "value");
    s->store->put(key, {value, size});
  });
}

int cachegen_store_get(cachegen_store* s, const char* key, uint8_t** out, size_t* out_size) {
  return guard([&] {
    const cachegen::capi::BytesOut result(out, out_size);
    need(s, "store");
    need(key, "key");
    result.set(s->store->get(key));
  });
}

int cachegen_store_exists(cachegen_store* s, const char* key, int* out_exists) {
  return guard([&] {
    need(out_exists, "out_exists");
    *out_exists = 0;
    need(s, "store");
    need(key, "key");
    *out_exists = s->store->exists(key) ? 1 : 0;
  });
}

int cachegen_store_remove(cachegen_store* s, const char* key, int* out_removed) {
  return guard([&] {
    if (out_removed) *out_removed = 0;
    need(s, "store");
    need(key, "key");
    const bool removed = s->store->remove(key);
    if (out_removed) *out_removed = removed ? 1 : 0;
  });
}

int cachegen_store_list(cachegen_store* s, const char* prefix, char** out_keys, size_t* out_count) {
  return guard([&] {
    need(out_keys, "out_keys");
    *out_keys = nullptr;
    need(out_count, "out_count");
    *out_count = 0;
    need(s, "store");
    const std::vector<std::string> keys = s->store->list(prefix ? prefix : "");
    *out_keys = cachegen::capi::malloc_strings(keys);
    *out_count = keys.size();
  });
}

}  // extern "C"
