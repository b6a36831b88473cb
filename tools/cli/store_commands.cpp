// `cachegen store put|get|list|rm URL ...`: move values between files and a store.
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
}

}  // namespace cachegen::cli
