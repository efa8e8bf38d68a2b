# SPDX-License-Identifier: Apache-2.0
# What `cmake --install` puts in the prefix; included by the root CMakeLists.txt when
# DURABLE_INSTALL is on. The files fall into three components, which are also the .deb packages
# (cmake/package.cmake):
#   runtime      the shared libraries, in a BUILD_SHARED_LIBS build         libdurable0.2
#   development  headers, static libraries or .so links, the CMake package,
#                the pkg-config files                                        libdurable-dev
#   cli          the durable command, its man page, its bash completion      durable

# A shared build's CLI finds the libdurable installed beside it, wherever the prefix is moved,
# unless the library directory is one the dynamic linker searches anyway.
if(BUILD_SHARED_LIBS AND NOT IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}"
   AND NOT IS_ABSOLUTE "${CMAKE_INSTALL_BINDIR}"
   AND NOT "${CMAKE_INSTALL_FULL_LIBDIR}" IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
  file(RELATIVE_PATH durable_lib_from_bin "/${CMAKE_INSTALL_BINDIR}" "/${CMAKE_INSTALL_LIBDIR}")
  set_target_properties(durable_cli PROPERTIES INSTALL_RPATH "$ORIGIN/${durable_lib_from_bin}")
endif()

install(TARGETS durable_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)
install(FILES ${PROJECT_SOURCE_DIR}/docs/man/durable.1
  DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT cli)
install(FILES ${PROJECT_SOURCE_DIR}/scripts/completion/durable.bash
  DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME durable COMPONENT cli)

install(TARGETS durable durable_testing EXPORT durableTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/durable
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT development)
install(EXPORT durableTargets NAMESPACE durable::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/durable COMPONENT development)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/durableConfig.cmake.in
  ${PROJECT_BINARY_DIR}/durableConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/durable)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/durableConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/durableConfig.cmake ${PROJECT_BINARY_DIR}/durableConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/durable COMPONENT development)

# pkg-config: durable.pc and durable-testing.pc.
#
# A static libdurable.a is all a consumer links, so its dependencies (SQLiteCpp, SQLite,
# Boost.Context, libpq, OpenSSL) are in Libs and Requires: `pkg-config --libs durable` links. A shared
# libdurable.so carries them itself, so they go to Libs.private and Requires.private, for
# `pkg-config --static` only. nlohmann_json and threads are public either way (the headers use
# them).
#
# Paths are relative to the .pc file's own directory (${pcfiledir}), so the file stays true
# after `cmake --install --prefix`, DESTDIR, or an unpacked .deb.

# "-lNAME" for an imported library target, with "-LDIR" first when the linker does not search
# DIR anyway.
function(durable_pc_link_flag target out)
  get_target_property(location ${target} LOCATION)
  get_filename_component(dir "${location}" DIRECTORY)
  get_filename_component(name "${location}" NAME)
  string(REGEX REPLACE "^lib" "" name "${name}")
  string(REGEX REPLACE "\\.(a|so)(\\.[0-9.]*)?$" "" name "${name}")
  set(flag "-l${name}")
  if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    set(flag "-L${dir} ${flag}")
  endif()
  set(${out} "${flag}" PARENT_SCOPE)
endfunction()

set(durable_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(pc_prefix "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH durable_pc_up "/${durable_pc_dir}" "/")
  string(REGEX REPLACE "/$" "" durable_pc_up "${durable_pc_up}")
  set(pc_prefix "\${pcfiledir}/${durable_pc_up}")
endif()
foreach(dir INCLUDEDIR LIBDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(pc_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(pc_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()

durable_pc_link_flag(SQLiteCpp durable_pc_sqlitecpp)
durable_pc_link_flag(Boost::context durable_pc_boost_context)
set(durable_pc_private_libs "${durable_pc_sqlitecpp} ${durable_pc_boost_context}")
if(BUILD_SHARED_LIBS)
  set(durable_pc_kind "shared")
  set(durable_pc_private_fields "Requires.private: sqlite3, libpq, libssl, libcrypto\nLibs.private: ${durable_pc_private_libs}\n")
  set(durable_pc_testing_private_fields "Libs.private: ${durable_pc_private_libs}\n")
  set(durable_pc_libs "")
  set(durable_pc_requires "nlohmann_json >= 3.10")
else()
  set(durable_pc_kind "static")
  set(durable_pc_private_fields "")
  set(durable_pc_testing_private_fields "")
  set(durable_pc_libs " ${durable_pc_private_libs}")
  set(durable_pc_requires "nlohmann_json >= 3.10, sqlite3, libpq, libssl, libcrypto")
endif()

set(pc_name durable)
set(pc_description "Durable execution for C++20: workflows whose steps survive crashes, journaled in SQLite")
set(pc_fields "Requires: ${durable_pc_requires}\n${durable_pc_private_fields}Cflags: -I\${includedir}\nLibs: -L\${libdir} -ldurable${durable_pc_libs} -pthread")
configure_file(${PROJECT_SOURCE_DIR}/cmake/durable.pc.in ${PROJECT_BINARY_DIR}/pkgconfig/durable.pc @ONLY)

set(pc_name durable-testing)
set(pc_description "The durable test kit: TestRuntime on an in-memory database and a virtual clock")
set(pc_fields "Requires: durable = ${PROJECT_VERSION}\n${durable_pc_testing_private_fields}Libs: -L\${libdir} -ldurable_testing${durable_pc_libs}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/durable.pc.in ${PROJECT_BINARY_DIR}/pkgconfig/durable-testing.pc @ONLY)

install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/durable.pc ${PROJECT_BINARY_DIR}/pkgconfig/durable-testing.pc
  DESTINATION ${durable_pc_dir} COMPONENT development)
