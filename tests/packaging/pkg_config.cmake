# SPDX-License-Identifier: Apache-2.0
# Installs the built durable to a scratch prefix, then compiles and runs tests/consumer/main.cpp
# with nothing but `pkg-config --cflags --libs durable-testing durable`: what a project that
# does not use CMake does. In a shared build, also checks the SONAME (libdurable.so.MAJOR.MINOR)
# and that the program needs that name.
#   cmake -DBUILD=<build dir> -DMAIN=<main.cpp> -DWORK=<scratch dir> -DCXX=<compiler>
#         [-DFLAGS=<the build's sanitizer flags>] -DVERSION=<x.y.z> -DSHARED=<ON|OFF>
#         -P tests/packaging/pkg_config.cmake
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
set(prefix "${WORK}/prefix")
file(REMOVE_RECURSE "${WORK}")
run(${CMAKE_COMMAND} --install "${BUILD}" --prefix "${prefix}")

file(GLOB_RECURSE pc_files "${prefix}/*/durable.pc")
if(NOT pc_files)
  message(FATAL_ERROR "cmake --install put no durable.pc under ${prefix}")
endif()
get_filename_component(pc_dir "${pc_files}" DIRECTORY)
set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
run(pkg-config --validate durable)
run(pkg-config --validate durable-testing)
run(pkg-config --modversion durable RESULT version)
if(NOT version STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config --modversion durable says '${version}', the project is ${VERSION}")
endif()
run(pkg-config --variable=libdir durable RESULT libdir)
run(pkg-config --cflags --libs durable-testing durable RESULT flags)
message(STATUS "pkg-config --cflags --libs durable-testing durable: ${flags}")
separate_arguments(flags UNIX_COMMAND "${flags}")
set(rpath)
if(SHARED)
  set(rpath "-Wl,-rpath,${libdir}")  # an installed prefix the loader does not search
endif()
separate_arguments(sanitizer UNIX_COMMAND "${FLAGS}")
run(${CXX} -std=c++20 ${sanitizer} "${MAIN}" -o "${WORK}/consumer" ${flags} ${rpath})
run("${WORK}/consumer")

if(SHARED)
  run(objdump -p "${libdir}/libdurable.so" RESULT headers)
  string(REGEX REPLACE "^([0-9]+\\.[0-9]+).*" "\\1" abi "${VERSION}")
  string(REPLACE "." "\\." abi_re "${abi}")
  if(NOT headers MATCHES "SONAME +libdurable\\.so\\.${abi_re}\n")
    message(FATAL_ERROR "libdurable.so's SONAME is not libdurable.so.${abi}:\n${headers}")
  endif()
  if(NOT EXISTS "${libdir}/libdurable.so.${abi}" OR NOT EXISTS "${libdir}/libdurable.so.${VERSION}")
    message(FATAL_ERROR "no libdurable.so.${abi} and libdurable.so.${VERSION} in ${libdir}")
  endif()
  run(objdump -p "${WORK}/consumer" RESULT needed)
  if(NOT needed MATCHES "NEEDED +libdurable\\.so\\.${abi_re}\n")
    message(FATAL_ERROR "the consumer does not need libdurable.so.${abi}:\n${needed}")
  endif()
endif()
message(STATUS "a program built with pkg-config's flags for durable linked and ran")
