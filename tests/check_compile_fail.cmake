# SPDX-License-Identifier: Apache-2.0
# Each source is a mistake a user makes, with the message its first error must say on a line
# "// expect: <text>". Compiles each with each compiler (syntax and semantics only) against the
# public headers, and fails unless the compile fails and its first error holds that text: a
# common mistake must stop at durable's static_assert, not at a wall of template errors.
#   cmake "-DCOMPILERS=g++;clang++" -DINCLUDE=<include dir> -DSOURCES=<a;b> -P check_compile_fail.cmake
cmake_minimum_required(VERSION 3.25)
list(REMOVE_ITEM COMPILERS "")
list(REMOVE_ITEM SOURCES "")
set(failures "")
foreach(compiler IN LISTS COMPILERS)
  foreach(source IN LISTS SOURCES)
    file(STRINGS "${source}" expect REGEX "^// expect: ")
    string(REGEX REPLACE "^// expect: " "" expect "${expect}")
    if(expect STREQUAL "")
      message(FATAL_ERROR "${source} has no '// expect: ' line")
    endif()
    execute_process(
      COMMAND "${compiler}" -std=c++20 -fsyntax-only -I "${INCLUDE}" "${source}"
      RESULT_VARIABLE code ERROR_VARIABLE errors)
    string(REGEX MATCH "error:[^\n]*" first "${errors}")
    string(FIND "${first}" "${expect}" at)
    if(code EQUAL 0)
      string(APPEND failures "${compiler} compiles ${source}, which must fail\n")
    elseif(at EQUAL -1)
      string(APPEND failures
        "${compiler} on ${source}: the first error is not \"${expect}\" but\n  ${first}\n")
    endif()
  endforeach()
endforeach()
if(NOT failures STREQUAL "")
  message(FATAL_ERROR "${failures}")
endif()
list(LENGTH SOURCES count)
message(STATUS "${count} mistakes each stop at durable's message with: ${COMPILERS}")
