# SPDX-License-Identifier: Apache-2.0
# Fails unless the tree carries its license: LICENSE at the root, and an SPDX line within the
# first three lines of every source, build and script file, man page and shell completion
# (node_modules and build trees aside).
#   cmake -DROOT=<source dir> -P tests/check_license.cmake
cmake_minimum_required(VERSION 3.25)
set(tag "SPDX-License-Identifier: Apache-2.0")
if(NOT EXISTS "${ROOT}/LICENSE")
  message(FATAL_ERROR "no LICENSE file at ${ROOT}")
endif()
file(READ "${ROOT}/LICENSE" license LIMIT 200)
if(NOT license MATCHES "Apache License")
  message(FATAL_ERROR "LICENSE is not the Apache License 2.0 text")
endif()
set(patterns)
foreach(dir src sqlite postgres include runtime testing tests samples bench cmake fuzz)
  list(APPEND patterns "${ROOT}/${dir}/*.cpp" "${ROOT}/${dir}/*.hpp" "${ROOT}/${dir}/*.h"
       "${ROOT}/${dir}/*.in" "${ROOT}/${dir}/*.cmake" "${ROOT}/${dir}/*.sh" "${ROOT}/${dir}/*.mjs"
       "${ROOT}/${dir}/*.html" "${ROOT}/${dir}/CMakeLists.txt")
endforeach()
file(GLOB_RECURSE files ${patterns})
# The man pages (roff) and the shell completions shipped with the CLI.
file(GLOB_RECURSE shipped "${ROOT}/docs/man/*.[1-9]" "${ROOT}/scripts/completion/*")
list(APPEND files ${shipped})
list(APPEND files "${ROOT}/CMakeLists.txt" "${ROOT}/scripts/demo" "${ROOT}/scripts/test"
     "${ROOT}/scripts/deps.sh" "${ROOT}/.ci/run")
list(FILTER files EXCLUDE REGEX "/node_modules/")
set(missing)
foreach(f IN LISTS files)
  file(STRINGS "${f}" head LIMIT_COUNT 3)
  string(FIND "${head}" "${tag}" at)
  if(at EQUAL -1)
    file(RELATIVE_PATH rel "${ROOT}" "${f}")
    list(APPEND missing "${rel}")
  endif()
endforeach()
list(LENGTH files count)
if(missing)
  list(JOIN missing "\n  " text)
  message(FATAL_ERROR "no '${tag}' line in the first three lines of:\n  ${text}")
endif()
message(STATUS "license: LICENSE and an SPDX line in each of ${count} files")
