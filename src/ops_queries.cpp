// SPDX-License-Identifier: Apache-2.0
#include "ops_queries.hpp"

#include <SQLiteCpp/SQLiteCpp.h>
#include <unistd.h>

#include <durable/errors.hpp>
#include <filesystem>

#include "store.hpp"
#include "store_sqlite.hpp"

namespace durable::detail {

namespace {

template <class F>
auto guarded(F&& body) {
  try {
    return body();
  } catch (const SQLite::Exception& e) {
    throw Error(std::string("database query failed: ") + e.what());
  }
}

}  // namespace

namespace {
// A live file, beside workers writing it: a plain read-only connection shares their WAL index
// and reads a consistent snapshot. Only where it could not (the directory cannot be written, as
// on a read-only mount, where nothing else can write either) is the file read as it stands.
std::unique_ptr<SQLite::Database> open_live_reader(const std::string& path) {
  std::filesystem::path directory = std::filesystem::path(path).parent_path();
  if (directory.empty()) directory = ".";
  if (::access(directory.c_str(), W_OK) != 0) return open_sqlite_reader(path);
  return std::make_unique<SQLite::Database>(path, SQLite::OPEN_READONLY);
}
}  // namespace

OpsQueries::OpsQueries(const std::string& path)
    : db_(guarded([&] { return open_live_reader(path); })) {
  db_->setBusyTimeout(10'000);
}

OpsQueries::~OpsQueries() = default;

std::map<std::string, std::int64_t> OpsQueries::count_runs(const std::string& workflow,
                                                           const std::string& correlation_id) {
  return guarded([&] {
    std::string sql = "SELECT status, count(*) FROM runs WHERE 1";
    if (!workflow.empty()) sql += " AND workflow = :workflow";
    if (!correlation_id.empty()) sql += " AND correlation_id = :correlation";
    SQLite::Statement query(*db_, sql + " GROUP BY status");
    if (!workflow.empty()) query.bind(":workflow", workflow);
    if (!correlation_id.empty()) query.bind(":correlation", correlation_id);
    std::map<std::string, std::int64_t> counts;
    while (query.executeStep())
      counts[query.getColumn(0).getString()] = query.getColumn(1).getInt64();
    return counts;
  });
}

std::vector<std::string> OpsQueries::known_workflows() {
  return guarded([&] {
    SQLite::Statement query(*db_, "SELECT name FROM workflows ORDER BY name");
    std::vector<std::string> names;
    while (query.executeStep()) names.push_back(query.getColumn(0).getString());
    return names;
  });
}

StepTotals OpsQueries::step_totals(const std::vector<std::int64_t>& bounds_ms) {
  return guarded([&] {
    StepTotals totals;
    // Of an entry's n attempts, all failed but a completed entry's last. They were retried
    // n - 1 times, or n times while the next attempt is still to come. retry() sets attempts
    // back to 0: max() keeps such an entry from counting less than nothing.
    SQLite::Statement sums(
        *db_,
        "SELECT count(*), "
        "coalesce(sum(max(attempts - (state = 'completed'), 0)), 0), "
        "coalesce(sum(max(attempts - (state != 'retrying'), 0)), 0), "
        "coalesce(sum(state = 'failed'), 0), "
        "coalesce(sum(duration_ms), 0), count(duration_ms) FROM steps WHERE kind = 'run'");
    if (sums.executeStep()) {
      totals.steps = sums.getColumn(0).getInt64();
      totals.failed_attempts = sums.getColumn(1).getInt64();
      totals.retries = sums.getColumn(2).getInt64();
      totals.failed_steps = sums.getColumn(3).getInt64();
      totals.duration_sum_ms = sums.getColumn(4).getInt64();
      totals.duration_count = sums.getColumn(5).getInt64();
    }
    if (bounds_ms.empty()) return totals;
    // Every bucket in one pass over the steps.
    std::string sql = "SELECT ";
    for (std::size_t i = 0; i < bounds_ms.size(); ++i) {
      sql += (i == 0 ? "" : ", ") + std::string("coalesce(sum(duration_ms <= ") +
             std::to_string(bounds_ms[i]) + "), 0)";
    }
    SQLite::Statement under(*db_, sql + " FROM steps WHERE kind = 'run'");
    if (under.executeStep()) {
      for (std::size_t i = 0; i < bounds_ms.size(); ++i) {
        totals.at_or_under.push_back(under.getColumn(static_cast<int>(i)).getInt64());
      }
    }
    return totals;
  });
}

std::int64_t OpsQueries::failures_alike(const std::string& workflow, const std::string& step_id,
                                        const std::string& type, std::int64_t since_ms,
                                        const std::string& except) {
  return guarded([&] {
    SQLite::Statement query(*db_,
                            "SELECT count(*) FROM runs WHERE status = 'failed' AND workflow = ? "
                            "AND updated_at >= ? AND id != ? "
                            "AND coalesce(json_extract(error, '$.step_id'), '') = ? "
                            "AND coalesce(json_extract(error, '$.type'), '') = ?");
    query.bind(1, workflow);
    query.bind(2, static_cast<int64_t>(since_ms));
    query.bind(3, except);
    query.bind(4, step_id);
    query.bind(5, type);
    return query.executeStep() ? query.getColumn(0).getInt64() : std::int64_t{0};
  });
}

std::int64_t OpsQueries::live_workers(std::int64_t now_ms) {
  return guarded([&] {
    // A worker that has not beaten yet has no lease recorded: the default's window applies.
    SQLite::Statement query(
        *db_,
        "SELECT count(*) FROM workers WHERE seen_at + ? * coalesce(lease_ms, ?) "
        "> ?");
    query.bind(1, static_cast<int64_t>(kLiveLeases));
    query.bind(2, static_cast<int64_t>(kDefaultLeaseMs));
    query.bind(3, static_cast<int64_t>(now_ms));
    return query.executeStep() ? query.getColumn(0).getInt64() : std::int64_t{0};
  });
}

}  // namespace durable::detail
