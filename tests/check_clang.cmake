# SPDX-License-Identifier: Apache-2.0
# Compiles each source with clang in C++20 (syntax and semantics, no code generated) against the
# public headers, with warnings as errors.
#   cmake -DCLANG=clang++ -DINCLUDE=<include dir> -DSOURCES=<a;b> -P tests/check_clang.cmake
cmake_minimum_required(VERSION 3.25)
list(REMOVE_ITEM SOURCES "")
foreach(source IN LISTS SOURCES)
  get_filename_component(dir "${source}" DIRECTORY)
  execute_process(
    COMMAND "${CLANG}" -std=c++20 -fsyntax-only -Wall -Wextra -Werror -I "${INCLUDE}" -I "${dir}"
      "${source}"
    RESULT_VARIABLE code ERROR_VARIABLE errors)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${CLANG} rejects ${source}:\n${errors}")
  endif()
endforeach()
execute_process(COMMAND "${CLANG}" --version OUTPUT_VARIABLE version)
string(REGEX MATCH "[^\n]*" version "${version}")
list(LENGTH SOURCES count)
message(STATUS "${count} files compile with ${version}")
