# The installable libraries: libcachegen.a and libcachegen.so, built from every layer's objects.
get_property(_layers GLOBAL PROPERTY CACHEGEN_LAYERS)
set(_objects)
foreach(_l IN LISTS _layers)
  list(APPEND _objects $<TARGET_OBJECTS:${_l}>)
endforeach()
get_property(_deps GLOBAL PROPERTY CACHEGEN_PRIVATE_DEPS)
get_property(_pc_deps GLOBAL PROPERTY CACHEGEN_PC_LIBS)

add_library(cachegen_static STATIC ${_objects})
add_library(cachegen_shared SHARED ${_objects})
set_target_properties(cachegen_static PROPERTIES OUTPUT_NAME cachegen EXPORT_NAME cachegen_static)
set_target_properties(cachegen_shared PROPERTIES OUTPUT_NAME cachegen EXPORT_NAME cachegen
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
foreach(_t cachegen_static cachegen_shared)
  target_include_directories(${_t} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${_t} PRIVATE $<BUILD_INTERFACE:cachegen_options>)
  target_link_libraries(${_t} PUBLIC Threads::Threads)
endforeach()
list(REMOVE_DUPLICATES _deps)
list(REMOVE_DUPLICATES _pc_deps)
foreach(_d IN LISTS _deps)
  target_link_libraries(cachegen_shared PRIVATE ${_d})
  target_link_libraries(cachegen_static INTERFACE $<BUILD_INTERFACE:${_d}>)
endforeach()
# Installed static-library users link the same system libraries by name.
foreach(_d IN LISTS _pc_deps)
  target_link_libraries(cachegen_static INTERFACE $<INSTALL_INTERFACE:${_d}>)
endforeach()
add_library(cachegen::cachegen ALIAS cachegen_shared)
add_library(cachegen::cachegen_static ALIAS cachegen_static)

include(CMakePackageConfigHelpers)
install(TARGETS cachegen_static cachegen_shared EXPORT cachegenTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/cachegen DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  PATTERN "llama*.h" EXCLUDE)  # the llama adapter is not part of the installed library
install(EXPORT cachegenTargets NAMESPACE cachegen:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cachegen)
configure_package_config_file(cmake/cachegenConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/cachegenConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cachegen)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/cachegenConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cachegenConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/cachegenConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cachegen)
string(JOIN " " CACHEGEN_PC_PRIVATE_LIBS ${_pc_deps})
file(RELATIVE_PATH CACHEGEN_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
configure_file(cmake/cachegen.pc.in ${CMAKE_CURRENT_BINARY_DIR}/cachegen.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cachegen.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(DIRECTORY tests/data/golden/ DESTINATION ${CMAKE_INSTALL_DATADIR}/cachegen/golden
  FILES_MATCHING PATTERN "bench_*_input.npy")
