// SPDX-License-Identifier: Apache-2.0
// Runs as read back: one with its state history, a filtered page of them, their ids, and their
// journals and steps. A run's birth and each change of its status are lifecycle.cpp's.

#include <algorithm>
#include <climits>
#include <utility>

#include "durations.hpp"
#include "errors_internal.hpp"
#include "ids.hpp"
#include "serialization.hpp"
#include "store/parts.hpp"

namespace durable::detail {

namespace {
constexpr const char* kJournalSelect =
    "SELECT key, base, kind, state, output, error, attempts, wake_at, invocation, updated_at, "
    "duration_ms, started_at, resolved FROM steps WHERE run_id = ? ORDER BY seq";
}  // namespace

std::string RunReads::run_columns() const {
  return "SELECT r.id, r.workflow, r.correlation_id, r.status, r.input, r.output, r.error, " +
         std::string(t_.db().dialect().greatest) +
         "(r.invocations, (SELECT coalesce(max(invocation), 0) FROM steps s WHERE s.run_id = "
         "r.id)), r.created_at, r.updated_at, r.due_at, coalesce(r.parent_id, ''), w.host, w.pid, "
         "r.version, coalesce(r.forked_from, ''), coalesce(r.continued_as, ''), r.priority, "
         "r.deadline_at, r.tags, r.paused, r.began_at, " +
         std::string(t_.db().dialect().run_order) +
         " FROM runs r LEFT JOIN workers w ON w.id = r.owner AND r.status = 'running'";
}

RunInfo RunReads::read_run(sql::Query& q) {
  RunInfo info;
  info.id = q.text(0);
  info.workflow = q.text(1);
  info.correlation_id = q.text(2);
  info.status = status_from_string(q.text(3)).value_or(Status::pending);
  const PayloadAt at{info.id, info.correlation_id, "input"};
  info.input = t_.payload(at, q.text(4));
  if (!q.is_null(5)) info.output = t_.payload({info.id, info.correlation_id, "output"}, q.text(5));
  if (!q.is_null(6)) info.error = t_.error_read({info.id, info.correlation_id, "error"}, q.text(6));
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
  if (!q.is_null(19)) info.tags = tags_of(t_.stored(q.text(19)));
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

std::optional<RunInfo> RunReads::get_run(const std::string& id, bool with_history) {
  if (!with_history) return t_.guarded([&] { return find_run(id, false); });
  return t_.reading([&] { return find_run(id, true); });
}

std::optional<RunWithSteps> RunReads::get_run_with_steps(const std::string& id) {
  return t_.reading([&]() -> std::optional<RunWithSteps> {
    std::optional<RunInfo> run = find_run(id, true);
    if (!run) return std::nullopt;
    std::optional<std::vector<StepInfo>> steps = read_steps(id);
    return RunWithSteps{std::move(*run), std::move(steps).value_or(std::vector<StepInfo>{})};
  });
}

std::optional<RunInfo> RunReads::find_run(const std::string& id, bool with_history) {
  if (!findable(id)) return std::nullopt;
  sql::Query query(t_.db(), run_columns() + " WHERE r.id = ?");
  query.bind(1, id);
  if (!query.next()) return std::nullopt;
  RunInfo info = read_run(query);
  if (with_history) {
    sql::Query history(t_.db(),
                       "SELECT status, at, reason FROM history WHERE run_id = ? ORDER BY id");
    history.bind(1, id);
    while (history.next()) {
      info.history.push_back({status_from_string(history.text(0)).value_or(Status::pending),
                              to_time(history.int64(1)), history.text(2)});
    }
  }
  return info;
}

std::vector<RunInfo> RunReads::list_runs(const RunFilter& filter) {
  return t_.guarded([&] {
    // Newest first, each page from where the last ended (keyset pagination): an index of the
    // filter's leading condition gives the runs in this order, with no sort and no OFFSET.
    std::optional<RunCursor> after;
    if (!filter.cursor.empty()) after = checked_run_cursor(filter.cursor);
    if (!filter_findable(filter)) return std::vector<RunInfo>{};
    const std::string order(t_.db().dialect().run_order);
    sql::Query query(t_.db(), run_columns() + " WHERE true" + filtered(filter) +
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

std::vector<std::string> RunReads::run_ids(const RunFilter& filter,
                                           const std::vector<Status>& statuses) {
  return t_.guarded([&] {
    std::vector<std::string> ids;
    if (!filter_findable(filter)) return ids;
    const bool any_of = !filter.status && !statuses.empty();
    sql::Query query(
        t_.db(),
        "SELECT r.id FROM runs r WHERE true" +
            (any_of ? " AND r.status IN (" + sql::placeholders(statuses.size()) + ")" : "") +
            filtered(filter) + " ORDER BY r.created_at, " +
            std::string(t_.db().dialect().run_order));
    int i = 1;
    if (any_of) {
      for (const Status status : statuses) query.bind(i++, to_string(status));
    }
    bind_filter(query, i, filter);
    while (query.next()) ids.push_back(query.text(0));
    return ids;
  });
}

bool RunReads::filter_findable(const RunFilter& filter) {
  if (!findable(filter.workflow) || !findable(filter.correlation_id) ||
      !findable(filter.failed_step) || !findable(filter.error_type)) {
    return false;
  }
  return std::all_of(filter.tags.begin(), filter.tags.end(),
                     [](const auto& tag) { return findable(tag.first) && findable(tag.second); });
}

// The conditions of a RunFilter but its limit, on `runs r`; bind_filter() binds them.
std::string RunReads::filtered(const RunFilter& filter) const {
  std::string sql;
  if (filter.status) sql += " AND r.status = ?";
  if (!filter.workflow.empty()) sql += " AND r.workflow = ?";
  if (!filter.correlation_id.empty()) sql += " AND r.correlation_id = ?";
  for (std::size_t i = 0; i < filter.tags.size(); ++i) {
    sql +=
        " AND EXISTS (SELECT 1 FROM run_tags t WHERE t.run_id = r.id AND t.key = ? AND "
        "t.value = ?)";
  }
  const auto field = t_.db().dialect().json_field;
  if (!filter.failed_step.empty()) sql += " AND " + field("r.error", "step_id") + " = ?";
  if (!filter.error_type.empty()) sql += " AND " + field("r.error", "type") + " = ?";
  if (filter.created_after) sql += " AND r.created_at >= ?";
  if (filter.created_before) sql += " AND r.created_at < ?";
  return sql;
}

int RunReads::bind_filter(sql::Query& query, int index, const RunFilter& filter) {
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

std::optional<RecordedRun> RunReads::recorded_run(const std::string& id) {
  return t_.reading([&]() -> std::optional<RecordedRun> {
    t_.clear_unreadable();
    std::optional<RunInfo> info = find_run(id, false);
    if (!info) return std::nullopt;
    std::vector<JournalEntry> journal = load_journal(id);
    return RecordedRun{std::move(*info), std::move(journal), t_.take_unreadable()};
  });
}

std::vector<JournalEntry> RunReads::load_journal(const std::string& id) {
  sql::Query q(t_.db(), kJournalSelect);
  q.bind(1, id);
  std::vector<JournalEntry> entries;
  while (q.next()) {
    JournalEntry e;
    e.key = q.text(0);
    e.base = q.text(1);
    const auto kind = step_kind_from_string(q.text(2));
    const auto state = step_state_from_string(q.text(3));
    if (!kind || !state)
      t_.fail("the journal of run " + id + " has an entry of unknown kind or state");
    e.kind = *kind;
    e.state = *state;
    if (!q.is_null(4)) e.output = t_.payload({id, "", step_slot(e.key, "output")}, q.text(4));
    if (!q.is_null(5)) e.error = t_.error_read({id, "", step_slot(e.key, "error")}, q.text(5));
    e.attempts = q.int32(6);
    if (!q.is_null(7)) e.wake_at_ms = q.int64(7);
    e.invocation = q.int32(8);
    e.updated_at_ms = q.int64(9);
    if (!q.is_null(10)) e.duration_ms = q.int64(10);
    if (!q.is_null(11)) e.started_at_ms = q.int64(11);
    if (!q.is_null(12)) e.resolved = q.text(12);
    entries.push_back(std::move(e));
  }
  return entries;
}

std::optional<std::vector<JournalEntry>> RunReads::journal(const std::string& id) {
  return t_.reading([&]() -> std::optional<std::vector<JournalEntry>> {
    if (!t_.run_exists(id)) return std::nullopt;
    return load_journal(id);
  });
}

std::optional<std::vector<StepInfo>> RunReads::list_steps(const std::string& id) {
  return t_.reading([&] { return read_steps(id); });
}

std::optional<std::vector<StepInfo>> RunReads::read_steps(const std::string& id) {
  if (!t_.run_exists(id)) return std::nullopt;
  std::vector<StepInfo> steps;
  for (const JournalEntry& e : load_journal(id)) {
    StepInfo info;
    info.id = e.key;
    info.kind = to_string(e.kind);
    info.status = to_string(e.state);
    info.output = e.output;
    info.error = e.error;
    info.attempts = e.attempts;
    if (e.wake_at_ms) info.wake_at = to_time(*e.wake_at_ms);
    if (e.duration_ms) info.duration = std::chrono::milliseconds(*e.duration_ms);
    if (e.started_at_ms) info.started_at = to_time(*e.started_at_ms);
    info.updated_at = to_time(e.updated_at_ms);
    info.resolved = e.resolved;
    steps.push_back(std::move(info));
  }
  return steps;
}

}  // namespace durable::detail
