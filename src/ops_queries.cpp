// SPDX-License-Identifier: Apache-2.0
#include "ops_queries.hpp"

#include <algorithm>
#include <durable/errors.hpp>

#include "store.hpp"
#include "store/sql.hpp"

namespace durable::detail {

template <class F>
auto OpsQueries::guarded(F&& body) {
  try {
    if (!db_) db_ = open_();
    return body();
  } catch (const sql::Failure& e) {
    if (e.fault() == sql::Fault::connection) db_.reset();
    const ErrorCode code = sql::code_of(e.fault());
    throw Error(code, std::string("database query failed: ") + e.what());
  }
}

OpsQueries::OpsQueries(Opener open) : open_(std::move(open)), db_(open_()) {}

OpsQueries::~OpsQueries() = default;

std::map<std::string, std::int64_t> OpsQueries::count_runs(const std::string& workflow,
                                                           const std::string& correlation_id) {
  return guarded([&] {
    std::map<std::string, std::int64_t> counts;
    if (correlation_id.empty()) {
      // The counts the store keeps (run_counts), not the runs: the same cost at any history.
      std::string text = "SELECT status, sum(runs) FROM run_counts";
      if (!workflow.empty()) text += " WHERE workflow = ?";
      sql::Query query(*db_, text + " GROUP BY status HAVING sum(runs) != 0");
      if (!workflow.empty()) query.bind(1, workflow);
      while (query.next()) counts[query.text(0)] = query.int64(1);
      return counts;
    }
    // One correlation id's runs, by its index: as many as it has, whatever the history.
    std::string text = "SELECT status, count(*) FROM runs WHERE correlation_id = ?";
    if (!workflow.empty()) text += " AND workflow = ?";
    sql::Query query(*db_, text + " GROUP BY status");
    query.bind(1, correlation_id);
    if (!workflow.empty()) query.bind(2, workflow);
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

StepTotals OpsQueries::step_totals() {
  StepTotals all;
  for (const StepGroup& group : steps_by_workflow().groups) add_totals(all, group.totals);
  return all;
}

std::vector<RunCount> OpsQueries::runs_by_workflow() {
  return guarded([&] {
    sql::Query query(*db_,
                     "SELECT workflow, status, sum(runs) FROM run_counts GROUP BY workflow, status "
                     "HAVING sum(runs) != 0");
    std::vector<RunCount> counts;
    while (query.next()) counts.push_back({query.text(0), query.text(1), query.int64(2)});
    return counts;
  });
}

StepGroups OpsQueries::steps_by_workflow() {
  return guarded([&] {
    sql::ReadTransaction read(*db_);
    std::vector<std::int64_t> bounds;
    {
      sql::Query query(*db_, "SELECT upper_ms FROM step_buckets ORDER BY upper_ms");
      while (query.next()) bounds.push_back(query.int64(0));
    }
    // The totals the store keeps (step_counts), by duration bucket: -1 for entries with no
    // measured duration, else the index of the first bound at or over it (bounds.size(): over
    // every bound). A bucket's entries count under each bound from its own on.
    sql::Query query(*db_,
                     "SELECT workflow, step, bucket, sum(entries), sum(failed_attempts), "
                     "sum(retries), sum(failed), sum(duration_ms) FROM step_counts "
                     "GROUP BY workflow, step, bucket ORDER BY workflow, step");
    std::vector<StepGroup> groups;
    while (query.next()) {
      if (groups.empty() || groups.back().workflow != query.text(0) ||
          groups.back().step != query.text(1)) {
        groups.push_back({query.text(0), query.text(1), {}});
        groups.back().totals.at_or_under.assign(bounds.size(), 0);
      }
      StepTotals& totals = groups.back().totals;
      const std::int64_t bucket = query.int64(2), entries = query.int64(3);
      totals.steps += entries;
      totals.failed_attempts += query.int64(4);
      totals.retries += query.int64(5);
      totals.failed_steps += query.int64(6);
      if (bucket < 0) continue;
      totals.duration_sum_ms += query.int64(7);
      totals.duration_count += entries;
      for (auto i = static_cast<std::size_t>(bucket); i < bounds.size(); ++i) {
        totals.at_or_under[i] += entries;
      }
    }
    std::erase_if(groups, [](const StepGroup& g) { return g.totals.steps == 0; });
    return StepGroups{std::move(bounds), std::move(groups)};
  });
}

void add_totals(StepTotals& into, const StepTotals& more) {
  into.steps += more.steps;
  into.failed_attempts += more.failed_attempts;
  into.retries += more.retries;
  into.failed_steps += more.failed_steps;
  into.duration_sum_ms += more.duration_sum_ms;
  into.duration_count += more.duration_count;
  into.at_or_under.resize(std::max(into.at_or_under.size(), more.at_or_under.size()));
  for (std::size_t i = 0; i < more.at_or_under.size(); ++i) {
    into.at_or_under[i] += more.at_or_under[i];
  }
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
