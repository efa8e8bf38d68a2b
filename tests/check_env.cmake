# SPDX-License-Identifier: Apache-2.0
# Fails when code of src/, runtime/ or testing/ reads a clock, waits on one, sleeps, starts a
# thread or draws randomness other than through the Env (src/env.hpp, DESIGN §11.3), and prints
# each such line. The Env's own file is the one place that may, and a line whose comment says
# why it is outside the Env ("// outside the Env: ...").
#   cmake -DROOT=<source dir> -P tests/check_env.cmake
cmake_minimum_required(VERSION 3.25)
set(rules
  "(Clock|clock|Steady)::now\\(\\)"                 "reads a clock"
  "std::(j?thread)[({]|std::jthread|std::thread [a-z_]+\\{|std::async|pthread_create|asio::thread_pool" "starts a thread"
  "this_thread::sleep_|[^a-z_:.>]u?sleep\\(|nanosleep"    "sleeps"
  "random_device|[^a-z_:.]rand\\(\\)|getrandom"       "draws randomness"
  "(\\.|->)wait_(until|for)\\([a-z_*]*(lock|lk|guard)_?[,)]" "waits on a clock")
set(patterns)
foreach(dir src runtime testing)
  list(APPEND patterns "${ROOT}/${dir}/*.cpp" "${ROOT}/${dir}/*.hpp")
endforeach()
file(GLOB_RECURSE files ${patterns})
set(problems)
set(scanned 0)
foreach(f IN LISTS files)
  file(RELATIVE_PATH rel "${ROOT}" "${f}")
  if(rel STREQUAL "src/env.cpp")
    continue()
  endif()
  math(EXPR scanned "${scanned} + 1")
  # One element per line: a semicolon or a bracket of the code would cut CMake's list apart.
  file(READ "${f}" text)
  string(REPLACE ";" "<semicolon>" text "${text}")
  string(REPLACE "[" "<lb>" text "${text}")
  string(REPLACE "]" "<rb>" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(number 0)
  foreach(line IN LISTS lines)
    math(EXPR number "${number} + 1")
    # A line that says why in a comment ("outside the Env: ...") is let through.
    if(line MATCHES "// outside the Env: ")
      continue()
    endif()
    string(REGEX REPLACE "//.*" "" code "${line}")
    set(i 0)
    list(LENGTH rules n)
    while(i LESS n)
      list(GET rules ${i} pattern)
      math(EXPR j "${i} + 1")
      list(GET rules ${j} what)
      if(code MATCHES "${pattern}")
        string(STRIP "${line}" shown)
        string(REPLACE "<semicolon>" ";" shown "${shown}")
        string(REPLACE "<lb>" "[" shown "${shown}")
        string(REPLACE "<rb>" "]" shown "${shown}")
        list(APPEND problems "${rel}:${number}: ${what} outside the Env: ${shown}")
      endif()
      math(EXPR i "${i} + 2")
    endwhile()
  endforeach()
endforeach()
if(scanned LESS 100)
  message(FATAL_ERROR "scanned only ${scanned} files under ${ROOT}")
endif()
if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "the Env:\n  ${text}")
endif()
message(STATUS "${scanned} files: time, waits, threads and randomness only through the Env")
