// Internal: the C API's store handle, shared by the store and context-store functions.
#pragma once

#include <memory>

#include "cachegen/store.h"

struct cachegen_store {
  std::unique_ptr<cachegen::Store> store;
};
