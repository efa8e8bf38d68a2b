// SPDX-License-Identifier: Apache-2.0
#pragma once
// Read-only queries operators ask of a durable database: counts by status, the workflows
// workers registered, step totals and durations, failures alike. On a connection of their own,
// so that they never hold up the store's writes.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace durable::detail {

namespace sql {
class Connection;
}

/// Journal totals over every run, as the journals are now: a retry() resets its run's failed
/// steps (their attempts start again from 0), so each of these can go down.
struct StepTotals {
  std::int64_t steps = 0;            ///< step.run entries
  std::int64_t failed_attempts = 0;  ///< their attempts that failed, retried or not
  std::int64_t retries = 0;          ///< their failed attempts that were tried again
  std::int64_t failed_steps = 0;     ///< step.run entries failed for good, caught or not
  /// Bodies with a measured duration: count at or under each bound (cumulative), sum and count.
  std::vector<std::int64_t> at_or_under;
  std::int64_t duration_sum_ms = 0;
  std::int64_t duration_count = 0;
};

class OpsQueries {
 public:
  using Opener = std::function<std::unique_ptr<sql::Connection>()>;
  /// Queries on a connection of their own, which `open` makes (open_ops_queries gives one). A
  /// call on a connection that broke fails; the next call opens a new one.
  explicit OpsQueries(Opener open);
  ~OpsQueries();
  OpsQueries(const OpsQueries&) = delete;
  OpsQueries& operator=(const OpsQueries&) = delete;

  /// Runs per status (every status present has an entry), of one workflow or of all (empty),
  /// and of one correlation id or of any (empty).
  std::map<std::string, std::int64_t> count_runs(const std::string& workflow,
                                                 const std::string& correlation_id);
  /// Workflows some runtime added, by name.
  std::vector<std::string> known_workflows();
  /// Totals of the journal; duration buckets at these upper bounds (ms, ascending).
  StepTotals step_totals(const std::vector<std::int64_t>& bounds_ms);
  /// Failed runs of `workflow` that failed at step `step_id` with an error of `type` since
  /// `since_ms`, `except` left out.
  std::int64_t failures_alike(const std::string& workflow, const std::string& step_id,
                              const std::string& type, std::int64_t since_ms,
                              const std::string& except);
  /// Live workers at now_ms: those whose heartbeat was seen less than kLiveLeases of their
  /// leases ago (store.hpp). A killed worker's row stays until its runs are taken over; it stops
  /// counting once its last heartbeat is that old.
  std::int64_t live_workers(std::int64_t now_ms);

 private:
  template <class F>
  auto guarded(F&& body);

  Opener open_;
  std::unique_ptr<sql::Connection> db_;  // null after it broke, until the next call
};

/// Opens a read connection to a database the store has already created or migrated: a file
/// or a PostgreSQL URI (is_postgres_uri).
std::unique_ptr<OpsQueries> open_ops_queries(const std::string& database);
std::unique_ptr<OpsQueries> open_sqlite_ops_queries(const std::string& path);
std::unique_ptr<OpsQueries> open_postgres_ops_queries(const std::string& uri);

}  // namespace durable::detail
