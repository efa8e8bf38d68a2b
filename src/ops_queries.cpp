// SPDX-License-Identifier: Apache-2.0
#include "ops_queries.hpp"

#include <durable/errors.hpp>

#include "store.hpp"
#include "store/sql.hpp"

namespace durable::detail {

namespace {

// 1 where the condition holds, else 0, to be summed.
std::string one_if(const std::string& condition) {
  return "CASE WHEN " + condition + " THEN 1 ELSE 0 END";
}

}  // namespace

template <class F>
auto OpsQueries::guarded(F&& body) {
  try {
    if (!db_) db_ = open_();
    return body();
  } catch (const sql::Failure& e) {
    if (e.fault() == sql::Fault::connection) db_.reset();
    throw Error(std::string("database query failed: ") + e.what());
  }
}

OpsQueries::OpsQueries(Opener open) : open_(std::move(open)), db_(open_()) {}

OpsQueries::~OpsQueries() = default;

std::map<std::string, std::int64_t> OpsQueries::count_runs(const std::string& workflow,
                                                           const std::string& correlation_id) {
  return guarded([&] {
    std::string text = "SELECT status, count(*) FROM runs WHERE true";
    if (!workflow.empty()) text += " AND workflow = ?";
    if (!correlation_id.empty()) text += " AND correlation_id = ?";
    sql::Query query(*db_, text + " GROUP BY status");
    int i = 1;
    if (!workflow.empty()) query.bind(i++, workflow);
    if (!correlation_id.empty()) query.bind(i, correlation_id);
    std::map<std::string, std::int64_t> counts;
    while (query.next()) counts[query.text(0)] = query.int64(1);
    return counts;
  });
}

std::vector<std::string> OpsQueries::known_workflows() {
  return guarded([&] {
    sql::Query query(*db_, "SELECT name FROM workflows ORDER BY name");
    std::vector<std::string> names;
    while (query.next()) names.push_back(query.text(0));
    return names;
  });
}

StepTotals OpsQueries::step_totals(const std::vector<std::int64_t>& bounds_ms) {
  return guarded([&] {
    sql::Query query(*db_,
                     "SELECT " + totals_columns(bounds_ms) + " FROM steps s WHERE s.kind = 'run'");
    return query.next() ? read_totals(query, 0, bounds_ms) : StepTotals{};
  });
}

std::vector<RunCount> OpsQueries::runs_by_workflow() {
  return guarded([&] {
    sql::Query query(*db_, "SELECT workflow, status, count(*) FROM runs GROUP BY workflow, status");
    std::vector<RunCount> counts;
    while (query.next()) counts.push_back({query.text(0), query.text(1), query.int64(2)});
    return counts;
  });
}

std::vector<StepGroup> OpsQueries::steps_by_workflow(const std::vector<std::int64_t>& bounds_ms) {
  return guarded([&] {
    sql::Query query(*db_, "SELECT r.workflow, s.base, " + totals_columns(bounds_ms) +
                               " FROM steps s JOIN runs r ON r.id = s.run_id WHERE s.kind = 'run' "
                               "GROUP BY r.workflow, s.base");
    std::vector<StepGroup> groups;
    while (query.next()) {
      groups.push_back({query.text(0), query.text(1), read_totals(query, 2, bounds_ms)});
    }
    return groups;
  });
}

// The columns of StepTotals over the step.run entries `s` of a query, which read_totals() reads.
std::string OpsQueries::totals_columns(const std::vector<std::int64_t>& bounds_ms) const {
  // Of an entry's n attempts, all failed but a completed entry's last. They were retried
  // n - 1 times, or n times while the next attempt is still to come. retry() sets attempts
  // back to 0: the greatest with 0 keeps such an entry from counting less than nothing.
  const std::string greatest(db_->dialect().greatest);
  std::string text = "count(*), coalesce(sum(" + greatest + "(s.attempts - " +
                     one_if("s.state = 'completed'") + ", 0)), 0), coalesce(sum(" + greatest +
                     "(s.attempts - " + one_if("s.state != 'retrying'") +
                     ", 0)), 0), coalesce(sum(" + one_if("s.state = 'failed'") +
                     "), 0), coalesce(sum(s.duration_ms), 0), count(s.duration_ms)";
  // Every bucket in the same pass over the steps.
  for (const std::int64_t bound : bounds_ms) {
    text += ", coalesce(sum(" + one_if("s.duration_ms <= " + std::to_string(bound)) + "), 0)";
  }
  return text;
}

StepTotals OpsQueries::read_totals(sql::Query& query, int first,
                                   const std::vector<std::int64_t>& bounds_ms) {
  StepTotals totals;
  totals.steps = query.int64(first);
  totals.failed_attempts = query.int64(first + 1);
  totals.retries = query.int64(first + 2);
  totals.failed_steps = query.int64(first + 3);
  totals.duration_sum_ms = query.int64(first + 4);
  totals.duration_count = query.int64(first + 5);
  for (std::size_t i = 0; i < bounds_ms.size(); ++i) {
    totals.at_or_under.push_back(query.int64(first + 6 + static_cast<int>(i)));
  }
  return totals;
}

std::int64_t OpsQueries::failures_alike(const std::string& workflow, const std::string& step_id,
                                        const std::string& type, std::int64_t since_ms,
                                        const std::string& except) {
  return guarded([&] {
    const auto field = db_->dialect().json_field;
    sql::Query query(*db_,
                     "SELECT count(*) FROM runs WHERE status = 'failed' AND workflow = ? "
                     "AND updated_at >= ? AND id != ? AND coalesce(" +
                         field("error", "step_id") + ", '') = ? AND coalesce(" +
                         field("error", "type") + ", '') = ?");
    query.bind(1, workflow);
    query.bind(2, since_ms);
    query.bind(3, except);
    query.bind(4, step_id);
    query.bind(5, type);
    return query.next() ? query.int64(0) : std::int64_t{0};
  });
}

std::int64_t OpsQueries::live_workers(std::int64_t now_ms) {
  return static_cast<std::int64_t>(live_worker_rows(now_ms).size());
}

std::vector<LiveWorker> OpsQueries::live_worker_rows(std::int64_t now_ms) {
  return guarded([&] {
    // A worker that has not beaten yet has no lease recorded: the default's window applies.
    sql::Query query(*db_,
                     "SELECT id, host, pid, started_at, counters FROM workers "
                     "WHERE seen_at + ? * coalesce(lease_ms, ?) > ? ORDER BY id");
    query.bind(1, kLiveLeases);
    query.bind(2, kDefaultLeaseMs);
    query.bind(3, now_ms);
    std::vector<LiveWorker> rows;
    while (query.next()) {
      rows.push_back({query.text(0), query.text(1), query.int64(2), query.int64(3),
                      query.is_null(4) ? std::string() : query.text(4)});
    }
    return rows;
  });
}

}  // namespace durable::detail
