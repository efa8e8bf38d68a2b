// SPDX-License-Identifier: Apache-2.0
// The one writer of runs.status: a run's birth (insert_run) and every change of its status
// (change_status), each checked against the lifecycle's table (src/lifecycle.hpp) and recorded
// in the run's history. The same SQL on both stores.
#include "lifecycle.hpp"

#include <algorithm>

#include "durations.hpp"
#include "errors_internal.hpp"
#include "serialization.hpp"
#include "store/parts.hpp"

namespace durable::detail {

StatusChange& StatusChange::set(std::string_view column, std::int64_t value) {
  columns_.push_back({std::string(column) + " = ?", value});
  return *this;
}

StatusChange& StatusChange::set(std::string_view column, std::string value) {
  columns_.push_back({std::string(column) + " = ?", std::move(value)});
  return *this;
}

StatusChange& StatusChange::set(std::string_view column, std::optional<std::int64_t> value) {
  if (!value) return set_null(column);
  return set(column, *value);
}

StatusChange& StatusChange::set_null(std::string_view column) {
  columns_.push_back({std::string(column) + " = NULL", std::monostate{}});
  return *this;
}

StatusChange& StatusChange::set_sql(std::string assignment, Value value) {
  columns_.push_back({std::move(assignment), std::move(value)});
  return *this;
}

// A change of a run's status inside the caller's transaction: checked against the lifecycle
// (a change the table does not hold is durable's bug), made only while the row holds the
// status read (`from`; else any the row leaves) and, for a fenced row, the owner, and recorded
// in the history. False when the row no longer held them: nothing was written.
bool RunLifecycle::change_status(const StatusChange& change) {
  const MoveRule& row = rule(change.move);
  // With no status read, the row's own (any the move leaves) is checked by the UPDATE.
  if (change.from || !row.to.has(change.to)) {
    check_move(change.move, change.from, change.to, change.run_id);
  }
  if (row.fenced && change.owner.empty()) {
    bug("run " + change.run_id + ": '" + std::string(row.name) + "' is its owner's to make");
  }
  std::string text = "UPDATE runs SET status = ?, updated_at = ?";
  for (const StatusChange::Column& column : change.columns()) text += ", " + column.assignment;
  text += " WHERE id = ? AND " + (change.from ? std::string("status = ?") : row.from.sql());
  if (row.fenced) text += " AND owner = ?";
  sql::Query update(t_.db(), text);
  int i = 1;
  update.bind(i++, to_string(change.to));
  update.bind(i++, change.at_ms);
  for (const StatusChange::Column& column : change.columns()) {
    if (const auto* number = std::get_if<std::int64_t>(&column.value)) {
      update.bind(i++, *number);
    } else if (const auto* text_value = std::get_if<std::string>(&column.value)) {
      update.bind(i++, *text_value);
    }
  }
  update.bind(i++, change.run_id);
  if (change.from) update.bind(i++, to_string(*change.from));
  if (row.fenced) update.bind(i, change.owner);
  if (update.run() == 0) return false;
  const std::string line = change.reason.empty() ? std::string(row.history) : change.reason;
  if (!line.empty()) add_history(change.run_id, change.at_ms, change.to, line);
  return true;
}

// Inserts a run inside the caller's transaction, or returns the run of the same workflow and
// idempotency key.
std::string RunLifecycle::insert_run(const NewRun& run) {
  if (!run.idempotency_key.empty()) {
    sql::Query existing(t_.db(), "SELECT id FROM runs WHERE workflow = ? AND idempotency_key = ?");
    existing.bind(1, run.workflow);
    existing.bind(2, run.idempotency_key);
    if (existing.next()) return existing.text(0);
  }
  // What its workflow's rules make of it (store/starts.cpp): paused, its keys, or debounced
  // into the run of its key that waits.
  const Admitted rules = admit_run(run);
  if (rules.debounced_into) return *rules.debounced_into;
  const Status status = rules.paused ? Status::paused : Status::pending;
  check_move(Move::start, std::nullopt, status, run.id);
  if (!write_new_run(run, rules, status)) {
    sql::Query existing(t_.db(), "SELECT id FROM runs WHERE workflow = ? AND idempotency_key = ?");
    existing.bind(1, run.workflow);
    existing.bind(2, run.idempotency_key);
    if (!existing.next()) bug("run " + run.id + " was neither inserted nor found");
    return existing.text(0);
  }
  for (const auto& [key, value] : run.tags) {
    sql::Query tag(t_.db(), "INSERT INTO run_tags (run_id, key, value) VALUES (?, ?, ?)");
    tag.bind(1, run.id);
    tag.bind(2, key);
    tag.bind(3, value);
    tag.run();
  }
  if (!rules.paused) t_.announce_work();
  std::string reason = run.reason.empty() ? std::string(rule(Move::start).history)
                                          : run.reason;
  if (rules.debounce_key) {
    reason += "; debounced: due at " + utc_text(std::max(run.due_ms, rules.due_ms)) +
              " unless a newer start of its key comes first";
  } else if (run.due_ms > run.now_ms) {
    reason += "; delayed until its start time";
  }
  add_history(run.id, run.now_ms, Status::pending, reason);
  if (rules.paused) {
    add_history(run.id, run.now_ms, Status::paused,
                "paused with its workflow '" + run.workflow + "'");
  }
  return run.id;
}

// The INSERT of insert_run. A run of the same key inserted meanwhile by another writer (where
// writers run side by side) leaves it doing nothing: false.
bool RunLifecycle::write_new_run(const NewRun& run, const Admitted& rules, Status status) {
  sql::Query insert(t_.db(),
                    "INSERT INTO runs (id, workflow, correlation_id, idempotency_key, status, "
                    "input, due_at, created_at, updated_at, parent_id, parent_step, version, "
                    "forked_from, priority, deadline_at, tags, paused, paused_from, flow_key, "
                    "rate_key, debounce_key, traceparent) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (workflow, idempotency_key) DO NOTHING");
  const bool paused = status == Status::paused;
  insert.bind(1, run.id);
  insert.bind(2, run.workflow);
  insert.bind(3, run.correlation_id);
  insert.bind_text_or_null(4, run.idempotency_key);
  insert.bind(5, to_string(status));
  insert.bind(6, t_.encoded({run.id, run.correlation_id, "input"}, run.input));
  insert.bind(7, std::max(run.due_ms, rules.due_ms));
  insert.bind(8, run.now_ms);
  insert.bind(9, run.now_ms);
  insert.bind_text_or_null(10, run.parent_id);
  insert.bind_text_or_null(11, run.parent_step);
  insert.bind(12, t_.version());
  insert.bind_text_or_null(13, run.forked_from);
  insert.bind(14, run.priority);
  const std::int64_t deadline = rules.deadline_ms > 0 ? rules.deadline_ms : run.deadline_ms;
  if (deadline > 0) {
    insert.bind(15, deadline);
  } else {
    insert.bind_null(15);
  }
  insert.bind_text_or_null(16, run.tags.empty() ? "" : json(run.tags).dump());
  insert.bind(17, paused ? kPausedByWorkflow : kNotPaused);
  insert.bind_text_or_null(18, paused ? "pending" : "");
  int i = 19;
  for (const std::optional<std::string>* key :
       {&rules.flow_key, &rules.rate_key, &rules.debounce_key}) {
    if (*key) {
      insert.bind(i++, **key);
    } else {
      insert.bind_null(i++);
    }
  }
  insert.bind_text_or_null(22, run.traceparent);
  if (insert.run() > 0) return true;
  insert.reset();
  return false;
}

void RunLifecycle::add_history(const std::string& id, std::int64_t at, Status status,
                               const std::string& reason) {
  sql::Query insert(t_.db(), "INSERT INTO history (run_id, id, at, status, reason) VALUES (?1, " +
                                 std::string(t_.db().dialect().next_history_id) + ", ?2, ?3, ?4)");
  insert.bind(1, id);
  insert.bind(2, at);
  insert.bind(3, to_string(status));
  insert.bind(4, utf8_or_replaced(reason));  // a step's own error message may be any bytes
  insert.run();
}

}  // namespace durable::detail
