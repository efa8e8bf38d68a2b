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
class Query;
}  // namespace sql

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

/// Adds `more` into `into`, bucket by bucket.
void add_totals(StepTotals& into, const StepTotals& more);

/// The StepTotals of one step id (StepGroup::step: the journal entry's base, "charge" for
/// "charge#2", "item[3]" for a map item) of one workflow.
struct StepGroup {
  std::string workflow, step;
  StepTotals totals;
};

/// steps_by_workflow(): the groups, and the bounds their at_or_under are counted at.
struct StepGroups {
  std::vector<std::int64_t> bounds_ms;  ///< upper bounds of the duration buckets, ascending
  std::vector<StepGroup> groups;
};

/// Runs of one workflow in one status.
struct RunCount {
  std::string workflow, status;
  std::int64_t runs = 0;
};

/// A live worker's row (OpsQueries::live_workers).
struct LiveWorker {
  std::string id, host;  ///< host: the whole identity (workers.host)
  std::int64_t pid = 0, started_at_ms = 0;
  std::string counters;  ///< JSON text its last heartbeat wrote; empty before the first
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
  /// Totals of the journal, at_or_under by the store's duration buckets (steps_by_workflow).
  StepTotals step_totals();
  /// Runs by workflow and status (statuses with no run have no entry).
  std::vector<RunCount> runs_by_workflow();
  /// step_totals() by workflow and step id, ordered by both, with the bounds of the duration
  /// buckets the store keeps them by; in one read transaction, so the two agree.
  StepGroups steps_by_workflow();
  /// Failed runs of `workflow` that failed at step `step_id` with an error of `type` since
  /// `since_ms`, `except` left out.
  std::int64_t failures_alike(const std::string& workflow, const std::string& step_id,
                              const std::string& type, std::int64_t since_ms,
                              const std::string& except);
  /// Live workers at now_ms: those whose heartbeat was seen less than kLiveLeases of their
  /// leases ago (store.hpp). A killed worker's row stays until its runs are taken over and it
  /// is forgotten (Store::forget_dead_workers); it stops counting once its last heartbeat is
  /// that old.
  std::int64_t live_workers(std::int64_t now_ms);
  /// The rows of those workers, by id.
  std::vector<LiveWorker> live_worker_rows(std::int64_t now_ms);

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
