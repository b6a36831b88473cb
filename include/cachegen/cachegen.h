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
#include "cachegen/planner.h"
#include "cachegen/planner_sim.h"
