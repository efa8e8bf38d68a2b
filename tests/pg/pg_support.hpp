// SPDX-License-Identifier: Apache-2.0
#pragma once
// The private cluster of the PostgreSQL tests, for tests of PostgreSQL alone: its URI, which
// must be set, and a fresh database on it for each test; a cluster of a test's own; and what the
// tests of lost connections look for.

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

/// A cluster of the test's own (tests/pg/cluster.sh) on `port` of 127.0.0.1, for a test that
/// restarts its server: the suite's cluster is shared by tests running at once. Each such test
/// has a port of its own (tests/pg/CMakeLists.txt), so that they too may run at once.
class OwnCluster {
 public:
  /// `synced`: the server syncs its writes to the disk (fsync); off for a test about something
  /// other than the server's own durability, which then waits on no disk.
  OwnCluster(const std::string& dir, int port, bool synced = true)
      : dir_(dir), port_(port), synced_(synced) {}
  /// Starts the server; the destructor stops whatever started, also after a failure half-way.
  void start() {
    const std::string fsync = synced_ ? "" : "PG_FSYNC=off ";
    REQUIRE(run_shell(fsync + command("start") + " " + std::to_string(port_)).first == 0);
  }
  ~OwnCluster() { run_shell(command("stop")); }
  OwnCluster(const OwnCluster&) = delete;
  OwnCluster& operator=(const OwnCluster&) = delete;

  std::string uri() const {
    return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/postgres";
  }
  int port() const { return port_; }
  /// Stops the server (fast: its sessions are ended) and starts it again; once it accepts
  /// connections, returns whether all went well. No check of the test's: any thread may call it.
  bool restart() { return run_shell(command("restart")).first == 0; }
  /// kill -9 of a client backend ("backend": the server then ends every session and recovers
  /// from its WAL) or of the postmaster ("postmaster": then started again); once the server
  /// accepts connections again, returns whether all went well.
  bool crash(const std::string& what) { return run_shell(command("crash") + " " + what).first == 0; }
  /// Starts this cluster as a streaming standby of `primary` (a base backup of it), instead of
  /// start().
  void start_standby_of(const OwnCluster& primary) {
    REQUIRE(run_shell(std::string("bash ") + DURABLE_PG_CLUSTER_SCRIPT + " standby '" +
                      primary.dir_ + "' '" + dir_ + "' " + std::to_string(port_))
                .first == 0);
  }

 private:
  std::string command(const std::string& verb) const {
    return std::string("bash ") + DURABLE_PG_CLUSTER_SCRIPT + " " + verb + " '" + dir_ + "'";
  }
  std::string dir_;
  int port_;
  bool synced_;
};

}  // namespace durable::test
