# Compiler settings shared by every cachegen target.
add_library(cachegen_options INTERFACE)
target_compile_options(cachegen_options INTERFACE
  -Wall -Wextra
  # The reference numerics are plain IEEE fp32: no fused multiply-add, no reassociation.
  -ffp-contract=off -fno-fast-math)
if(CACHEGEN_WERROR)
  target_compile_options(cachegen_options INTERFACE -Werror)
endif()
if(CACHEGEN_SANITIZE)
  target_compile_options(cachegen_options INTERFACE
    -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_link_options(cachegen_options INTERFACE -fsanitize=address,undefined)
endif()
if(CACHEGEN_SANITIZE_THREAD)
  # TSan cannot share a process with ASan; the tsan preset builds only the concurrency tests.
  if(CACHEGEN_SANITIZE)
    message(FATAL_ERROR "CACHEGEN_SANITIZE_THREAD and CACHEGEN_SANITIZE are exclusive")
  endif()
  target_compile_options(cachegen_options INTERFACE -fsanitize=thread -fno-omit-frame-pointer)
  target_link_options(cachegen_options INTERFACE -fsanitize=thread)
endif()
find_package(Threads REQUIRED)
target_link_libraries(cachegen_options INTERFACE Threads::Threads)

# cachegen_layer(NAME SOURCES...) declares one layer as an OBJECT library.
function(cachegen_layer name)
  add_library(${name} OBJECT ${ARGN})
  target_include_directories(${name}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE cachegen_options)
  set_property(GLOBAL APPEND PROPERTY CACHEGEN_LAYERS ${name})
endfunction()
