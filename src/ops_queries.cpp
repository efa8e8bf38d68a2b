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
    StepTotals totals;
    // Of an entry's n attempts, all failed but a completed entry's last. They were retried
    // n - 1 times, or n times while the next attempt is still to come. retry() sets attempts
    // back to 0: the greatest with 0 keeps such an entry from counting less than nothing.
    const std::string greatest(db_->dialect().greatest);
    sql::Query sums(*db_, "SELECT count(*), coalesce(sum(" + greatest + "(attempts - " +
                              one_if("state = 'completed'") + ", 0)), 0), coalesce(sum(" +
                              greatest + "(attempts - " + one_if("state != 'retrying'") +
                              ", 0)), 0), coalesce(sum(" + one_if("state = 'failed'") +
                              "), 0), coalesce(sum(duration_ms), 0), count(duration_ms) "
                              "FROM steps WHERE kind = 'run'");
    if (sums.next()) {
      totals.steps = sums.int64(0);
      totals.failed_attempts = sums.int64(1);
      totals.retries = sums.int64(2);
      totals.failed_steps = sums.int64(3);
      totals.duration_sum_ms = sums.int64(4);
      totals.duration_count = sums.int64(5);
    }
    if (bounds_ms.empty()) return totals;
    // Every bucket in one pass over the steps.
    std::string text = "SELECT ";
    for (std::size_t i = 0; i < bounds_ms.size(); ++i) {
      text += (i == 0 ? "coalesce(sum(" : ", coalesce(sum(") +
              one_if("duration_ms <= " + std::to_string(bounds_ms[i])) + "), 0)";
    }
    sql::Query under(*db_, text + " FROM steps WHERE kind = 'run'");
    if (under.next()) {
      for (std::size_t i = 0; i < bounds_ms.size(); ++i) {
        totals.at_or_under.push_back(under.int64(static_cast<int>(i)));
      }
    }
    return totals;
  });
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
  return guarded([&] {
    // A worker that has not beaten yet has no lease recorded: the default's window applies.
    sql::Query query(*db_,
                     "SELECT count(*) FROM workers WHERE seen_at + ? * coalesce(lease_ms, ?) > ?");
    query.bind(1, kLiveLeases);
    query.bind(2, kDefaultLeaseMs);
    query.bind(3, now_ms);
    return query.next() ? query.int64(0) : std::int64_t{0};
  });
}

}  // namespace durable::detail
