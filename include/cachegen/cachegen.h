// cachegen: umbrella header of the C++ API.
#pragma once

#include "cachegen/error.h"
#include "cachegen/half.h"
#include "cachegen/npy.h"
#include "cachegen/quant.h"
#include "cachegen/runtime.h"
#if __has_include("cachegen/codec.h")
#include "cachegen/codec.h"
#endif
#if __has_include("cachegen/store.h")
#include "cachegen/store.h"
#endif
#include "cachegen/container.h"
#include "cachegen/context_loader.h"
#include "cachegen/context_store.h"
#include "cachegen/encode.h"
#include "cachegen/kv_cache.h"
#include "cachegen/planner.h"
#include "cachegen/planner_sim.h"
#include "cachegen/quality_levels.h"
#include "cachegen/transform.h"
