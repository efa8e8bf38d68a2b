# SPDX-License-Identifier: Apache-2.0
# Shared by the packaging checks (cmake -P scripts in this directory).

# Runs a command; stops the check with its output when it fails. RESULT <var> receives stdout.
function(run)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "RESULT" "")
  execute_process(COMMAND ${arg_UNPARSED_ARGUMENTS} RESULT_VARIABLE rc OUTPUT_VARIABLE out
    ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    list(JOIN arg_UNPARSED_ARGUMENTS " " text)
    message(FATAL_ERROR "failed (${rc}): ${text}\n${out}${err}")
  endif()
  if(arg_RESULT)
    string(STRIP "${out}" out)
    set(${arg_RESULT} "${out}" PARENT_SCOPE)
  endif()
endfunction()

# Stops the check unless TEXT holds NEEDLE (a plain string).
function(expect_in text needle what)
  string(FIND "${text}" "${needle}" at)
  if(at EQUAL -1)
    string(SUBSTRING "${text}" 0 1500 shown)
    message(FATAL_ERROR "${what}: no '${needle}' in:\n${shown}")
  endif()
endfunction()

# The -D arguments that configure a user's project with the build's compiler and sanitizer flags
# (CXX, FLAGS, when given): a program linking a sanitized durable is built with the same.
function(consumer_toolchain out)
  set(args)
  if(CXX)
    list(APPEND args "-DCMAKE_CXX_COMPILER=${CXX}")
  endif()
  if(FLAGS)
    list(APPEND args "-DCMAKE_CXX_FLAGS=${FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${FLAGS}")
  endif()
  set(${out} ${args} PARENT_SCOPE)
endfunction()
