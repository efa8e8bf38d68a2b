# SPDX-License-Identifier: Apache-2.0
# Packages the built tree as .debs with CPack (cmake/package.cmake), unpacks each with
# `dpkg-deb -x` into a scratch root (no root rights, no dpkg database), checks the packages'
# names, dependencies and files, runs the packaged `durable`, and builds and runs tests/consumer
# against the unpacked /usr with find_package(durable).
#   cmake -DBUILD=<build dir> -DCONSUMER=<tests/consumer> -DWORK=<scratch dir> -DVERSION=<x.y.z>
#         -DSHARED=<ON|OFF> [-DCXX=<compiler> -DFLAGS=<the build's sanitizer flags>]
#         -P tests/packaging/deb.cmake
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
file(REMOVE_RECURSE "${WORK}")
set(root "${WORK}/root")
file(MAKE_DIRECTORY "${root}")

# The tree is already built (ctest runs after the build). CPack builds nothing in a Ninja tree
# (Ninja has no preinstall target): it installs each component from the tree into its own
# staging directory under WORK and packs it.
run(cpack --config "${BUILD}/CPackConfig.cmake" -G DEB -B "${WORK}/packages")
file(GLOB debs "${WORK}/packages/*.deb")

string(REGEX REPLACE "^([0-9]+\\.[0-9]+).*" "\\1" abi "${VERSION}")
set(expected libdurable-dev durable)
if(SHARED)
  list(APPEND expected libdurable${abi})
endif()
set(found)
foreach(deb IN LISTS debs)
  run(dpkg-deb -f "${deb}" Package RESULT name)
  run(dpkg-deb -f "${deb}" Version RESULT deb_version)
  run(dpkg-deb -f "${deb}" Depends RESULT depends_${name})
  if(NOT deb_version STREQUAL VERSION)
    message(FATAL_ERROR "${deb}: version '${deb_version}', the project is ${VERSION}")
  endif()
  list(APPEND found ${name})
  run(dpkg-deb -x "${deb}" "${root}")
  message(STATUS "${name} ${deb_version}: Depends: ${depends_${name}}")
endforeach()
list(SORT found)
list(SORT expected)
if(NOT found STREQUAL expected)
  message(FATAL_ERROR "cpack made packages '${found}'; expected '${expected}'")
endif()

# libdurable-dev depends on the Debian -dev packages durable's CMake package config and
# durable.pc need; the CLI on the shared libraries it loads.
foreach(dev nlohmann-json3-dev libsqlite3-dev libsqlitecpp-dev libboost-context-dev)
  expect_in("${depends_libdurable-dev}" "${dev}" "libdurable-dev's Depends")
endforeach()
if(SHARED)
  expect_in("${depends_libdurable-dev}" "libdurable${abi} (= ${VERSION})" "libdurable-dev's Depends")
  expect_in("${depends_durable}" "libdurable${abi} (= ${VERSION})" "durable's Depends")
  expect_in("${depends_libdurable${abi}}" "libsqlite3-0" "libdurable${abi}'s Depends")
  expect_in("${depends_libdurable${abi}}" "libboost-context" "libdurable${abi}'s Depends")
else()
  expect_in("${depends_durable}" "libsqlite3-0" "durable's Depends")
endif()

foreach(file bin/durable share/man/man1/durable.1 share/bash-completion/completions/durable
             include/durable/durable.hpp include/durable/version.hpp
             share/doc/durable/copyright share/doc/libdurable-dev/copyright)
  if(NOT EXISTS "${root}/usr/${file}")
    message(FATAL_ERROR "no /usr/${file} in the packages")
  endif()
endforeach()
file(GLOB_RECURSE configs "${root}/usr/*/durableConfig.cmake")
file(GLOB_RECURSE pcs "${root}/usr/*/pkgconfig/durable.pc")
if(NOT configs OR NOT pcs)
  message(FATAL_ERROR "no durableConfig.cmake or durable.pc in libdurable-dev")
endif()

# The packaged command runs, and finds the packaged shared library (if any) beside it.
file(GLOB_RECURSE libs "${root}/usr/*/libdurable*")
set(lib_dirs)
foreach(lib IN LISTS libs)
  get_filename_component(dir "${lib}" DIRECTORY)
  list(APPEND lib_dirs "${dir}")
endforeach()
list(REMOVE_DUPLICATES lib_dirs)
list(JOIN lib_dirs ":" lib_path)
run(${CMAKE_COMMAND} -E env "LD_LIBRARY_PATH=${lib_path}" "${root}/usr/bin/durable" --version
  RESULT cli_version)
if(NOT cli_version STREQUAL "durable ${VERSION}")
  message(FATAL_ERROR "the packaged durable says '${cli_version}'")
endif()

consumer_toolchain(toolchain)
run(${CMAKE_COMMAND} -S "${CONSUMER}" -B "${WORK}/consumer" -G Ninja
  "-DCMAKE_PREFIX_PATH=${root}/usr" ${toolchain})
run(${CMAKE_COMMAND} --build "${WORK}/consumer")
run("${WORK}/consumer/consumer")
message(STATUS "the .debs unpacked, and a find_package(durable) project built against them ran")
