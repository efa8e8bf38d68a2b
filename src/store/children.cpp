// SPDX-License-Identifier: Apache-2.0
// Child runs: created with their parent's invoke step (exactly once, in the same transaction),
// answering the parent when they end, and cancelled with it.

#include "serialization.hpp"
#include "store/parts.hpp"
#include "trace_context.hpp"

namespace durable::detail {

// A child run for a new invoke entry of `parent`, created with the entry: exactly once.
void Waits::create_child(const std::string& parent, const JournalEntry& e, std::int64_t now_ms) {
  NewRun child;
  {
    sql::Query parent_run(t_.db(), "SELECT correlation_id, traceparent FROM runs WHERE id = ?");
    parent_run.bind(1, parent);
    if (parent_run.next()) {
      child.correlation_id = parent_run.text(0);
      // The child joins its parent's trace, under the span of the invoke step that started it.
      trace::TraceParent context =
          trace::run_context(parent, parent_run.is_null(1) ? "" : parent_run.text(1));
      context.span_id = trace::step_span(parent, e.key, 1);
      child.traceparent = trace::format_traceparent(context);
    }
  }
  child.id = e.output.value("run", "");
  child.workflow = e.output.value("workflow", "");
  child.input = e.output.value("input", json::object()).dump();
  child.now_ms = child.due_ms = now_ms;
  child.parent_id = parent;
  child.parent_step = e.key;
  child.reason = "started by run " + parent + " (step '" + e.key + "')";
  lifecycle_.insert_run(child);
}

// A run that ended: the parent waiting on it in an invoke step gets its output, or a failure.
void Waits::resolve_parent(const std::string& id, Status status,
                           const std::optional<std::string>& output,
                           const std::optional<ErrorInfo>& error, std::int64_t now_ms) {
  std::string parent, key, workflow;
  {
    sql::Query query(t_.db(),
                     "SELECT parent_id, parent_step, workflow FROM runs WHERE id = ? "
                     "AND parent_id IS NOT NULL");
    query.bind(1, id);
    if (!query.next()) return;
    parent = query.text(0);
    key = query.text(1);
    workflow = query.text(2);
  }
  {
    // A child of an earlier attempt of the step (before a retry) answers nothing: the step
    // waits on the run its entry names.
    sql::Query waiting(t_.db(),
                       "SELECT output FROM steps WHERE run_id = ? AND key = ? AND "
                       "state = 'waiting'");
    waiting.bind(1, parent);
    waiting.bind(2, key);
    if (!waiting.next() || waiting.is_null(0)) return;
    const json entry = t_.payload({parent, "", step_slot(key, "output")}, waiting.text(0));
    if (!entry.is_object() || entry.value("run", "") != id) return;
  }
  sql::Query update(t_.db(),
                    "UPDATE steps SET state = ?, output = ?, error = ?, updated_at = ? "
                    "WHERE run_id = ? AND key = ? AND state = 'waiting'");
  std::string what;
  if (status == Status::completed) {
    update.bind(1, "completed");
    const json result = {
        {"run", id}, {"workflow", workflow}, {"output", output ? t_.stored(*output) : json()}};
    update.bind(2, t_.encoded({parent, "", step_slot(key, "output")}, result.dump()));
    update.bind_null(3);
    what = "completed";
  } else {
    ErrorInfo failure = error.value_or(ErrorInfo{"durable::Error", "", "", 0});
    failure.message = "child run " + id + " of '" + workflow + "' " +
                      (status == Status::cancelled ? "was cancelled" : "failed") +
                      (failure.message.empty() ? "" : ": " + failure.message);
    if (status == Status::cancelled) failure.type = "durable::Error";
    failure.step_id = key;
    failure.attempts = 1;
    update.bind(1, "failed");
    update.bind_null(2);
    update.bind(3, t_.error_stored({parent, "", step_slot(key, "error")}, failure));
    what = status == Status::cancelled ? "was cancelled" : "failed";
  }
  update.bind(4, now_ms);
  update.bind(5, parent);
  update.bind(6, key);
  if (update.run() > 0) wake(parent, now_ms, "child run " + id + " " + what);
}

// Cancels a run that has not ended, and its children, inside the caller's transaction.
void Waits::cancel_in(const std::string& id, std::int64_t now_ms, const std::string& reason) {
  end_in(id, Status::cancelled, std::nullopt, now_ms, reason);
}

bool Waits::end_in(const std::string& id, Status status, const std::optional<ErrorInfo>& error,
                   std::int64_t now_ms, const std::string& reason) {
  StatusChange change{status == Status::cancelled ? Move::cancel : Move::expire, id,
                      status, now_ms, reason};
  if (error) {
    change.set("error", t_.error_stored({id, "", "error"}, *error));
  } else {
    change.set_null("error");
  }
  change.set_null("due_at")
      .set_null("owner")
      .set("paused", std::int64_t{kNotPaused})
      .set_null("paused_from");
  if (!lifecycle_.change_status(change)) return false;
  {
    sql::Query waits(t_.db(), "DELETE FROM waits WHERE run_id = ?");
    waits.bind(1, id);
    waits.run();
  }
  std::vector<std::string> children;
  {
    sql::Query query(t_.db(),
                     "SELECT id FROM runs WHERE parent_id = ? AND " + std::string(kUnendedStatus));
    query.bind(1, id);
    while (query.next()) children.push_back(query.text(0));
  }
  const std::string why = status == Status::cancelled ? "cancelled with its parent run " + id
                                                      : "cancelled: its parent run " + id + " " +
                                                            (error ? error->message : "failed");
  for (const std::string& child : children) cancel_in(child, now_ms, why);
  resolve_parent(id, status, std::nullopt, error, now_ms);
  return true;
}

}  // namespace durable::detail
