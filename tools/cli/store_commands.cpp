// `cachegen store put|get|list|rm URL ...`: move values between files and a store;
// `cachegen store gc --store URL`: remove what killed writers left behind.
#include <chrono>
#include <cstdio>
#include <memory>

#include "cachegen/npy.h"
#include "cachegen/store.h"
#include "commands.h"
#include "kv_io.h"

namespace cachegen::cli {

void add_store_commands(CLI::App& app) {
  CLI::App* s = app.add_subcommand("store", "put, get, list or remove values in a store");
  s->require_subcommand(1);
  struct Args {
    std::string url, key, file, prefix;
  };
  auto a = std::make_shared<Args>();
  CLI::App* put = s->add_subcommand("put", "store a file's bytes under a key");
  put->add_option("url", a->url, "file://DIR or redis://HOST:PORT[/DB]")->required();
  put->add_option("key", a->key)->required();
  put->add_option("file", a->file)->required();
  put->callback([a] { open_store(a->url)->put(a->key, read_file_bytes(a->file)); });
  CLI::App* get = s->add_subcommand("get", "write a key's value to a file");
  get->add_option("url", a->url)->required();
  get->add_option("key", a->key)->required();
  get->add_option("-o,--output", a->file)->required();
  get->callback(
      [a] { write_file_atomic(a->file, open_store(a->url, StoreOpen::existing)->get(a->key)); });
  CLI::App* list = s->add_subcommand("list", "list keys (optionally with a prefix)");
  list->add_option("url", a->url)->required();
  list->add_option("prefix", a->prefix);
  list->callback([a] {
    for (const std::string& k : open_store(a->url, StoreOpen::existing)->list(a->prefix))
      std::printf("%s\n", k.c_str());
  });
  CLI::App* rm = s->add_subcommand("rm", "remove a key");
  rm->add_option("url", a->url)->required();
  rm->add_option("key", a->key)->required();
  rm->callback([a] {
    if (!open_store(a->url, StoreOpen::existing)->remove(a->key))
      throw Error(ErrorCode::not_found, "no key '" + a->key + "'");
  });
  auto grace_s = std::make_shared<double>(3600);
  CLI::App* gc = s->add_subcommand(
      "gc", "remove what killed writers left behind (temp files, unreferenced Redis parts)");
  gc->add_option("url", a->url, "file://DIR or redis://HOST:PORT[/DB]");
  gc->add_option("--store", a->url, "the store (instead of the positional URL)");
  gc->add_option("--grace", *grace_s,
                 "seconds a FileStore temp file must be untouched before it counts as left "
                 "behind (default 3600)")
      ->check(CLI::NonNegativeNumber);
  gc->callback([a, grace_s] {
    if (a->url.empty()) throw Error(ErrorCode::invalid_argument, "store gc needs --store URL");
    const auto grace = std::chrono::milliseconds(static_cast<int64_t>(*grace_s * 1000));
    const Store::GcResult r = open_store(a->url)->gc(grace);
    std::printf("removed %zu leftovers; %zu more carry an expiry and will vanish on their own\n",
                r.removed, r.expiring);
  });
}

}  // namespace cachegen::cli
