# SPDX-License-Identifier: Apache-2.0
# DURABLE_INSTALL: a project that pulls durable in with FetchContent (tests/packaging/subproject)
# and runs `cmake --install` gets its own files in its prefix and none of durable's (headers,
# libraries, CMake package, pkg-config files, the CLI, its man page). Setting DURABLE_INSTALL=ON
# brings durable's install rules back. Nothing is compiled: configuring and installing is enough.
#   cmake -DSOURCE=<durable source dir> -DWORK=<scratch dir> -P tests/packaging/subproject.cmake
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
set(build "${WORK}/build")
set(prefix "${WORK}/prefix")
file(REMOVE_RECURSE "${WORK}")
run(${CMAKE_COMMAND} -S "${CMAKE_CURRENT_LIST_DIR}/subproject" -B "${build}" -G Ninja
  "-DDURABLE_SOURCE=${SOURCE}")
file(STRINGS "${build}/CMakeCache.txt" option REGEX "^DURABLE_INSTALL:")
if(NOT option STREQUAL "DURABLE_INSTALL:BOOL=OFF")
  message(FATAL_ERROR "as a subproject, durable's DURABLE_INSTALL is '${option}', not OFF")
endif()
if(EXISTS "${build}/CPackConfig.cmake")
  message(FATAL_ERROR "durable as a subproject set up CPack for the project that includes it")
endif()

run(${CMAKE_COMMAND} --install "${build}" --prefix "${prefix}")
file(GLOB_RECURSE installed LIST_DIRECTORIES false RELATIVE "${prefix}" "${prefix}/*")
if(NOT installed STREQUAL "include/shop/shop.hpp")
  list(JOIN installed "\n  " text)
  message(FATAL_ERROR "the project's install put more than its own include/shop/shop.hpp in "
    "its prefix:\n  ${text}")
endif()

# Opting in: durable's install rules are generated again (installing them would need a build).
run(${CMAKE_COMMAND} -DDURABLE_INSTALL=ON "${build}")
file(GLOB_RECURSE scripts "${build}/_deps/*/cmake_install.cmake")
set(rules "")
foreach(script IN LISTS scripts)
  file(READ "${script}" text)
  string(APPEND rules "${text}")
endforeach()
foreach(installed_file "/include/durable\"" "durable.pc" "durableConfig.cmake" "durable.1")
  expect_in("${rules}" "${installed_file}" "durable's install rules with DURABLE_INSTALL=ON")
endforeach()
message(STATUS "a FetchContent project installed its own files and none of durable's")
