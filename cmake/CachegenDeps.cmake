# Third-party packages, found once at the top level so that every layer, and the combined
# libraries, see the same imported targets. All come from Debian 12 packages installed by
# scripts/install-deps.sh.
find_package(PkgConfig REQUIRED)
find_package(zstd REQUIRED)                       # libzstd-dev: bench peers, lossless level
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET GLOBAL libxxhash)  # libxxhash-dev
find_package(hiredis QUIET)                       # libhiredis-dev: RedisStore
if(NOT hiredis_FOUND)
  pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET GLOBAL hiredis)
  add_library(hiredis::hiredis ALIAS PkgConfig::HIREDIS)
endif()
if(TARGET zstd::libzstd_shared)
  set(CACHEGEN_ZSTD zstd::libzstd_shared)
else()
  set(CACHEGEN_ZSTD zstd::libzstd_static)
endif()
# Header-only; the container layer writes inspect JSON with it (never in a public header).
find_package(nlohmann_json 3 REQUIRED)            # nlohmann-json3-dev
if(CACHEGEN_BUILD_CLI)
  find_package(CLI11 REQUIRED)                    # libcli11-dev
endif()
if(CACHEGEN_BUILD_TESTS)
  find_package(GTest REQUIRED)                    # libgtest-dev
endif()
if(CACHEGEN_BUILD_BENCH)
  find_package(benchmark REQUIRED)                # libbenchmark-dev
endif()

# cachegen_private_dep(LAYER TARGET PC_NAME): LAYER links TARGET privately, and so do the
# combined libraries; PC_NAME goes into cachegen.pc's Requires/Libs.private.
function(cachegen_private_dep layer target pc_libs)
  target_link_libraries(${layer} PRIVATE ${target})
  set_property(GLOBAL APPEND PROPERTY CACHEGEN_PRIVATE_DEPS ${target})
  set_property(GLOBAL APPEND PROPERTY CACHEGEN_PC_LIBS ${pc_libs})
endfunction()
