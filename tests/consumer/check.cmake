# SPDX-License-Identifier: Apache-2.0
# Installs the built durable to a prefix, then configures, builds and runs tests/consumer
# against it with find_package(durable): what a user's project does.
set(prefix "${WORK}/prefix")
file(REMOVE_RECURSE "${WORK}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install "${BUILD}" --prefix "${prefix}")
# The build's compiler and sanitizer flags (CXX, FLAGS), when given: a program linking a
# sanitized durable is built with the same.
set(toolchain)
if(CXX)
  list(APPEND toolchain "-DCMAKE_CXX_COMPILER=${CXX}")
endif()
if(FLAGS)
  list(APPEND toolchain "-DCMAKE_CXX_FLAGS=${FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${FLAGS}")
endif()
run(${CMAKE_COMMAND} -S "${SOURCE}" -B "${WORK}/build" -G Ninja "-DCMAKE_PREFIX_PATH=${prefix}"
  ${toolchain})
run(${CMAKE_COMMAND} --build "${WORK}/build")
run("${WORK}/build/consumer")
message(STATUS "a project using find_package(durable) built and ran")
