// SPDX-License-Identifier: Apache-2.0
// The doctest main of durable_pg_tests, the tests that need the PostgreSQL cluster CTest starts
// (postgres/CMakeLists.txt); kept apart from durable_tests, which need no server.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
