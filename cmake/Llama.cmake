# llama.cpp as a static dependency of the cachegen_llama adapter (CACHEGEN_WITH_LLAMA=ON).
#
# The source is the pinned checkout that scripts/fetch-llama.sh puts in third_party/_deps/llama.cpp
# (node-llama-cpp@3.22.1's gitRelease.bundle, llama.cpp commit de3ff81). It is built once inside
# this build tree (${CMAKE_BINARY_DIR}/_deps/llama.cpp) and reused by incremental builds.
# Provides the targets `llama` and `ggml` (static, portable: GGML_NATIVE=OFF).
set(CACHEGEN_LLAMA_SOURCE_DIR "${PROJECT_SOURCE_DIR}/third_party/_deps/llama.cpp" CACHE PATH
    "llama.cpp source tree (fetched by scripts/fetch-llama.sh)")
if(NOT EXISTS "${CACHEGEN_LLAMA_SOURCE_DIR}/include/llama.h")
  message(FATAL_ERROR
    "CACHEGEN_WITH_LLAMA=ON but the llama.cpp source is missing at ${CACHEGEN_LLAMA_SOURCE_DIR}.\n"
    "Run scripts/fetch-llama.sh (needs npm) or set -DCACHEGEN_LLAMA_SOURCE_DIR=..., "
    "or configure with -DCACHEGEN_WITH_LLAMA=OFF.")
endif()

# Options are forced into llama.cpp's scope only: the directory scope below is llama.cpp's.
function(cachegen_add_llama)
  set(BUILD_SHARED_LIBS OFF)
  set(GGML_NATIVE OFF CACHE BOOL "" FORCE)        # portable binaries; the same numbers on CI
  set(GGML_OPENMP OFF CACHE BOOL "" FORCE)        # ggml's own thread pool; no libgomp
  set(GGML_BACKEND_DL OFF CACHE BOOL "" FORCE)
  set(GGML_BUILD_TESTS OFF CACHE BOOL "" FORCE)
  set(GGML_BUILD_EXAMPLES OFF CACHE BOOL "" FORCE)
  set(LLAMA_BUILD_COMMON OFF CACHE BOOL "" FORCE)
  set(LLAMA_BUILD_TESTS OFF CACHE BOOL "" FORCE)
  set(LLAMA_BUILD_TOOLS OFF CACHE BOOL "" FORCE)
  set(LLAMA_BUILD_EXAMPLES OFF CACHE BOOL "" FORCE)
  set(LLAMA_BUILD_SERVER OFF CACHE BOOL "" FORCE)
  set(LLAMA_BUILD_APP OFF CACHE BOOL "" FORCE)
  set(LLAMA_BUILD_UI OFF CACHE BOOL "" FORCE)
  set(LLAMA_OPENSSL OFF CACHE BOOL "" FORCE)
  set(LLAMA_ALL_WARNINGS OFF CACHE BOOL "" FORCE)
  # Our sanitizer/Werror flags live on cachegen_options, never on llama.cpp's targets.
  add_subdirectory("${CACHEGEN_LLAMA_SOURCE_DIR}" "${CMAKE_BINARY_DIR}/_deps/llama.cpp"
                   EXCLUDE_FROM_ALL SYSTEM)
endfunction()
cachegen_add_llama()

foreach(_t llama ggml)
  if(NOT TARGET ${_t})
    message(FATAL_ERROR "llama.cpp at ${CACHEGEN_LLAMA_SOURCE_DIR} did not define target '${_t}'")
  endif()
endforeach()
