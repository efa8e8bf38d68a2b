// SPDX-License-Identifier: Apache-2.0
// The version: one in the headers, the library and the build.

#include <doctest/doctest.h>

#include <durable/durable.hpp>
#include <string>

TEST_CASE("the library, the headers and the build tell one version") {
  CHECK(durable::version() == DURABLE_VERSION_STRING);
  CHECK(durable::version() == DURABLE_PROJECT_VERSION);
  const std::string parts = std::to_string(DURABLE_VERSION_MAJOR) + "." +
                            std::to_string(DURABLE_VERSION_MINOR) + "." +
                            std::to_string(DURABLE_VERSION_PATCH);
  CHECK(parts == DURABLE_VERSION_STRING);
}
