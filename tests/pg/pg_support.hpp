// SPDX-License-Identifier: Apache-2.0
#pragma once
// The private cluster of the PostgreSQL tests, for tests of PostgreSQL alone: its URI, which
// must be set, and a fresh database on it for each test; and what the tests of lost connections
// look for.

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "stores.hpp"
#include "support.hpp"

namespace durable::test {

/// What the store adds to the error of a lost connection (sql::advice), in a call's error or in
/// a log line.
inline constexpr const char* kLostConnection = "the connection to the database server was lost";

/// The lines a runtime logs (RuntimeOptions::log_sink), written from its threads. Must outlive
/// the runtime.
class CapturedLog {
 public:
  std::function<void(std::string_view)> sink() {
    return [this](std::string_view line) {
      std::lock_guard lock(mutex_);
      lines_.emplace_back(line);
    };
  }
  /// Whether a line holds every one of `parts`.
  bool has(const std::vector<std::string>& parts) const {
    std::lock_guard lock(mutex_);
    return std::any_of(lines_.begin(), lines_.end(), [&](const std::string& line) {
      return std::all_of(parts.begin(), parts.end(),
                         [&](const std::string& part) { return test::has(line, part); });
    });
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

/// fresh_pg_database(), failing the test when CTest gave no cluster.
inline std::string fresh_database() {
  if (pg_uri().empty()) FAIL("DURABLE_TEST_PG_URI is not set: run these tests with ctest");
  return fresh_pg_database();
}

}  // namespace durable::test
