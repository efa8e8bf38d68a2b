# SPDX-License-Identifier: Apache-2.0
# Installs the built durable to a prefix, then configures, builds and runs tests/consumer
# against it with find_package(durable): what a user's project does.
set(prefix "${WORK}/prefix")
file(REMOVE_RECURSE "${WORK}")
include(${CMAKE_CURRENT_LIST_DIR}/../packaging/common.cmake)
run(${CMAKE_COMMAND} --install "${BUILD}" --prefix "${prefix}")
consumer_toolchain(toolchain)
run(${CMAKE_COMMAND} -S "${SOURCE}" -B "${WORK}/build" -G Ninja "-DCMAKE_PREFIX_PATH=${prefix}"
  ${toolchain})
run(${CMAKE_COMMAND} --build "${WORK}/build")
run("${WORK}/build/consumer")
message(STATUS "a project using find_package(durable) built and ran")
