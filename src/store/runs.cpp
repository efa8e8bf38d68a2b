// SPDX-License-Identifier: Apache-2.0
// Runs: creating them in batches, reading and listing them, their state history, and the
// operator's cancel and retry. A run's birth and each change of its status are lifecycle.cpp's.

#include <algorithm>
#include <climits>
#include <utility>

#include "durations.hpp"
#include "errors_internal.hpp"
#include "ids.hpp"
#include "serialization.hpp"
#include "store/sql_store.hpp"

namespace durable::detail {

Clock::time_point to_time(std::int64_t ms) {
  return Clock::time_point(std::chrono::milliseconds(ms));
}

SqlStore::SqlStore(std::unique_ptr<sql::Connection> db, std::string name)
    : db_(std::move(db)), name_(std::move(name)) {}

std::unique_ptr<sql::Connection> SqlStore::reconnect() {
  fail("the connection broke and cannot be made again");
}

void SqlStore::restore() {
  try {
    db_ = reconnect();
  } catch (const sql::Failure& e) {
    fail_with(e);
  }
  broken_ = false;
}

void SqlStore::fail(const std::string& what, ErrorCode code) const {
  throw Error(code, "database '" + name_ + "': " + what);
}

void SqlStore::fail_with(const sql::Failure& e) const {
  fail(std::string(e.what()) + sql::advice(e.fault()), sql::code_of(e.fault()));
}

// JSON text read back from the database. Text nested deeper than kMaxStoredDepth can only have
// been written before the limit or by another tool; parsed, it would crash whatever copies or
// writes it on a small stack. It reads as a string saying so, and unreadable_ records it, so
// that claim() fails such a run instead of executing it.
std::map<std::string, std::string> SqlStore::tags_of(const json& stored) {
  std::map<std::string, std::string> tags;
  if (!stored.is_object()) return tags;
  for (const auto& [key, value] : stored.items()) {
    if (value.is_string()) tags[key] = value.get<std::string>();
  }
  return tags;
}

json SqlStore::stored(const std::string& text) {
  if (auto problem = too_deep_text(text, kMaxStoredDepth)) {
    unreadable_ = "a value stored in it cannot be read: " + *problem;
    return "<unreadable: nested more than " + std::to_string(kMaxStoredDepth) + " levels deep>";
  }
  return json::parse(text);
}

std::string SqlStore::create_run(const NewRun& run) {
  return guarded([&] {
    sql::Transaction tx(db());
    std::string id = insert_run(run);
    tx.commit();
    return id;
  });
}

bool SqlStore::run_exists(const std::string& id) {
  if (!findable(id)) return false;
  sql::Query query(db(), "SELECT 1 FROM runs WHERE id = ?");
  query.bind(1, id);
  return query.next();
}

void SqlStore::announce_work() {
  const std::string_view statement = db().dialect().notify_work;
  if (statement.empty()) return;
  sql::Query notify(db(), std::string(statement));
  notify.run();
}

void SqlStore::lock(const std::string& key) {
  const std::string_view statement = db().dialect().lock_key;
  if (statement.empty()) return;
  sql::Query query(db(), std::string(statement));
  query.bind(1, key);
  while (query.next()) {
  }
}

std::optional<Status> SqlStore::locked_status(const std::string& id) {
  if (!findable(id)) return std::nullopt;
  sql::Query query(db(),
                   "SELECT status FROM runs WHERE id = ?" + std::string(db().dialect().lock_row));
  query.bind(1, id);
  if (!query.next()) return std::nullopt;
  return status_from_string(query.text(0));
}

std::string SqlStore::run_columns() const {
  return "SELECT r.id, r.workflow, r.correlation_id, r.status, r.input, r.output, r.error, " +
         std::string(db_->dialect().greatest) +
         "(r.invocations, (SELECT coalesce(max(invocation), 0) FROM steps s WHERE s.run_id = "
         "r.id)), r.created_at, r.updated_at, r.due_at, coalesce(r.parent_id, ''), w.host, w.pid, "
         "r.version, coalesce(r.forked_from, ''), coalesce(r.continued_as, ''), r.priority, "
         "r.deadline_at, r.tags, r.paused, r.began_at, " +
         std::string(db_->dialect().run_order) +
         " FROM runs r LEFT JOIN workers w ON w.id = r.owner AND r.status = 'running'";
}

RunInfo SqlStore::read_run(sql::Query& q) {
  RunInfo info;
  info.id = q.text(0);
  info.workflow = q.text(1);
  info.correlation_id = q.text(2);
  info.status = status_from_string(q.text(3)).value_or(Status::pending);
  const PayloadAt at{info.id, info.correlation_id, "input"};
  info.input = payload(at, q.text(4));
  if (!q.is_null(5)) info.output = payload({info.id, info.correlation_id, "output"}, q.text(5));
  if (!q.is_null(6)) info.error = error_read({info.id, info.correlation_id, "error"}, q.text(6));
  info.invocations = q.int32(7);
  info.created_at = to_time(q.int64(8));
  info.updated_at = to_time(q.int64(9));
  if (!q.is_null(10) && (info.status == Status::pending || info.status == Status::sleeping ||
                         info.status == Status::waiting || info.status == Status::paused)) {
    info.wake_at = to_time(q.int64(10));
  }
  info.parent_id = q.text(11);
  info.version = q.text(14);
  info.forked_from = q.text(15);
  info.continued_as = q.text(16);
  info.priority = q.int32(17);
  if (!q.is_null(18)) info.deadline = to_time(q.int64(18));
  if (!q.is_null(19)) info.tags = tags_of(stored(q.text(19)));
  info.pausing = info.status == Status::running && q.int32(20) != kNotPaused;
  if (!q.is_null(21)) info.began_at = to_time(q.int64(21));
  info.cursor = to_string(RunCursor{q.int64(8), q.int64(22)});
  if (info.status == Status::running) {
    // Who holds it: "HOST:PID" of its owner, the host name being the part of the worker's host
    // identity (host_identity() in runtime/runtime.cpp) before the first space. due_at is the lease
    // expiry while running; the owner's row may be gone (pruned by an older durable), and the
    // run still held until then.
    if (!q.is_null(12)) {
      const std::string host = q.text(12);
      info.worker = host.substr(0, host.find(' ')) + ":" + std::to_string(q.int64(13));
    }
    if (!q.is_null(10)) info.lease_until = to_time(q.int64(10));
  }
  return info;
}

std::optional<RunInfo> SqlStore::get_run(const std::string& id, bool with_history) {
  if (!with_history) return guarded([&] { return find_run(id, false); });
  return reading([&] { return find_run(id, true); });
}

std::optional<RunWithSteps> SqlStore::get_run_with_steps(const std::string& id) {
  return reading([&]() -> std::optional<RunWithSteps> {
    std::optional<RunInfo> run = find_run(id, true);
    if (!run) return std::nullopt;
    std::optional<std::vector<StepInfo>> steps = read_steps(id);
    return RunWithSteps{std::move(*run), std::move(steps).value_or(std::vector<StepInfo>{})};
  });
}

std::optional<RunInfo> SqlStore::find_run(const std::string& id, bool with_history) {
  if (!findable(id)) return std::nullopt;
  sql::Query query(db(), run_columns() + " WHERE r.id = ?");
  query.bind(1, id);
  if (!query.next()) return std::nullopt;
  RunInfo info = read_run(query);
  if (with_history) {
    sql::Query history(db(), "SELECT status, at, reason FROM history WHERE run_id = ? ORDER BY id");
    history.bind(1, id);
    while (history.next()) {
      info.history.push_back({status_from_string(history.text(0)).value_or(Status::pending),
                              to_time(history.int64(1)), history.text(2)});
    }
  }
  return info;
}

std::vector<RunInfo> SqlStore::list_runs(const RunFilter& filter) {
  return guarded([&] {
    // Newest first, each page from where the last ended (keyset pagination): an index of the
    // filter's leading condition gives the runs in this order, with no sort and no OFFSET.
    std::optional<RunCursor> after;
    if (!filter.cursor.empty()) after = checked_run_cursor(filter.cursor);
    if (!findable(filter)) return std::vector<RunInfo>{};
    const std::string order(db().dialect().run_order);
    sql::Query query(db(), run_columns() + " WHERE true" + filtered(filter) +
                               (after ? " AND (r.created_at, " + order + ") < (?, ?)" : "") +
                               " ORDER BY r.created_at DESC, " + order + " DESC LIMIT ?");
    int i = bind_filter(query, 1, filter);
    if (after) {
      query.bind(i++, after->created_ms);
      query.bind(i++, after->row);
    }
    query.bind(i, static_cast<std::int64_t>(std::min<std::size_t>(filter.limit, INT64_MAX)));
    std::vector<RunInfo> runs;
    while (query.next()) runs.push_back(read_run(query));
    return runs;
  });
}

std::vector<std::string> SqlStore::run_ids(const RunFilter& filter,
                                           const std::vector<Status>& statuses) {
  return guarded([&] {
    std::vector<std::string> ids;
    if (!findable(filter)) return ids;
    const bool any_of = !filter.status && !statuses.empty();
    sql::Query query(
        db(), "SELECT r.id FROM runs r WHERE true" +
                  (any_of ? " AND r.status IN (" + sql::placeholders(statuses.size()) + ")" : "") +
                  filtered(filter) + " ORDER BY r.created_at, " +
                  std::string(db().dialect().run_order));
    int i = 1;
    if (any_of) {
      for (const Status status : statuses) query.bind(i++, to_string(status));
    }
    bind_filter(query, i, filter);
    while (query.next()) ids.push_back(query.text(0));
    return ids;
  });
}

bool SqlStore::findable(const RunFilter& filter) {
  if (!findable(filter.workflow) || !findable(filter.correlation_id) ||
      !findable(filter.failed_step) || !findable(filter.error_type)) {
    return false;
  }
  return std::all_of(filter.tags.begin(), filter.tags.end(),
                     [](const auto& tag) { return findable(tag.first) && findable(tag.second); });
}

// The conditions of a RunFilter but its limit, on `runs r`; bind_filter() binds them.
std::string SqlStore::filtered(const RunFilter& filter) const {
  std::string sql;
  if (filter.status) sql += " AND r.status = ?";
  if (!filter.workflow.empty()) sql += " AND r.workflow = ?";
  if (!filter.correlation_id.empty()) sql += " AND r.correlation_id = ?";
  for (std::size_t i = 0; i < filter.tags.size(); ++i) {
    sql +=
        " AND EXISTS (SELECT 1 FROM run_tags t WHERE t.run_id = r.id AND t.key = ? AND "
        "t.value = ?)";
  }
  const auto field = db_->dialect().json_field;
  if (!filter.failed_step.empty()) sql += " AND " + field("r.error", "step_id") + " = ?";
  if (!filter.error_type.empty()) sql += " AND " + field("r.error", "type") + " = ?";
  if (filter.created_after) sql += " AND r.created_at >= ?";
  if (filter.created_before) sql += " AND r.created_at < ?";
  return sql;
}

int SqlStore::bind_filter(sql::Query& query, int index, const RunFilter& filter) {
  if (filter.status) query.bind(index++, to_string(*filter.status));
  if (!filter.workflow.empty()) query.bind(index++, filter.workflow);
  if (!filter.correlation_id.empty()) query.bind(index++, filter.correlation_id);
  for (const auto& [key, value] : filter.tags) {
    query.bind(index++, key);
    query.bind(index++, value);
  }
  if (!filter.failed_step.empty()) query.bind(index++, filter.failed_step);
  if (!filter.error_type.empty()) query.bind(index++, filter.error_type);
  if (filter.created_after) query.bind(index++, to_ms(*filter.created_after));
  if (filter.created_before) query.bind(index++, to_ms(*filter.created_before));
  return index;
}

std::optional<RecordedRun> SqlStore::recorded_run(const std::string& id) {
  return reading([&]() -> std::optional<RecordedRun> {
    unreadable_.reset();
    std::optional<RunInfo> info = find_run(id, false);
    if (!info) return std::nullopt;
    std::vector<JournalEntry> journal = load_journal(id);
    return RecordedRun{std::move(*info), std::move(journal),
                       std::exchange(unreadable_, std::nullopt)};
  });
}

std::optional<Status> SqlStore::cancel(const std::string& id, std::int64_t now_ms,
                                       const std::string& reason) {
  return guarded([&]() -> std::optional<Status> {
    sql::Transaction tx(db());
    const std::optional<Status> before = locked_status(id);
    if (!before) return std::nullopt;
    const std::string history = reason.empty() ? "cancelled" : "cancelled: " + reason;
    if (before == Status::failed) {
      // Closed, not cancelled midway: its parent heard of the failure when it failed, and its
      // children ended with it. The error stays, for whoever looks at it later.
      StatusChange close{Move::close, id, Status::cancelled, now_ms, history, *before};
      change_status(close.set("crashes", std::int64_t{0}));
    } else {
      cancel_in(id, now_ms, history);
    }
    tx.commit();
    return before;
  });
}

bool SqlStore::retry(const std::string& id, std::int64_t now_ms) {
  return guarded([&] {
    sql::Transaction tx(db());
    const std::optional<Status> current = locked_status(id);
    if (!current) return false;
    if (current != Status::failed) {
      throw RunStateRefused("run " + id + " is " + std::string(to_string(*current)) +
                            "; only a failed run can be retried");
    }
    requeue(id, Status::failed, now_ms, "retry requested; {} failed step(s) run again");
    tx.commit();
    return true;
  });
}

std::int64_t SqlStore::requeue(const std::string& id, Status from, std::int64_t now_ms,
                               std::string reason) {
  sql::Query steps(db(),
                   "UPDATE steps SET state = 'retrying', attempts = 0, wake_at = NULL, "
                   "updated_at = ? WHERE run_id = ? AND state = 'failed'");
  steps.bind(1, now_ms);
  steps.bind(2, id);
  const std::int64_t reset = steps.run();
  if (const std::size_t at = reason.find("{}"); at != std::string::npos) {
    reason.replace(at, 2, std::to_string(reset));
  }
  StatusChange change{Move::requeue, id, Status::pending, now_ms, reason, from};
  change.set("due_at", now_ms)
      .set_null("owner")
      .set_null("output")
      .set_null("error")
      .set("crashes", std::int64_t{0})
      // A deadline that passed (the run failed by it) is dropped: the operator asked for more.
      .set_sql("deadline_at = CASE WHEN deadline_at <= ? THEN NULL ELSE deadline_at END", now_ms);
  change_status(change);
  announce_work();
  return reset;
}

}  // namespace durable::detail
