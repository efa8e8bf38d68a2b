// SPDX-License-Identifier: Apache-2.0
#pragma once
// The private cluster of the PostgreSQL tests, for tests of PostgreSQL alone: its URI, which
// must be set, and a fresh database on it for each test.

#include <doctest/doctest.h>

#include "stores.hpp"

namespace durable::test {

/// fresh_pg_database(), failing the test when CTest gave no cluster.
inline std::string fresh_database() {
  if (pg_uri().empty()) FAIL("DURABLE_TEST_PG_URI is not set: run these tests with ctest");
  return fresh_pg_database();
}

}  // namespace durable::test
