// SPDX-License-Identifier: Apache-2.0
// What an operator does to one run from outside: creating it, cancelling it, retrying it (its
// failed steps queued again), and forgetting a correlation's data (its data key destroyed, its
// runs cancelled). Pausing, deadlines and deletes are control.cpp's; resolve and fork,
// repairs.cpp's.

#include "store/parts.hpp"

namespace durable::detail {

std::string Interventions::create_run(const NewRun& run) {
  return t_.guarded([&] {
    sql::Transaction tx(t_.db());
    std::string id = lifecycle_.insert_run(run);
    tx.commit();
    return id;
  });
}

std::optional<Status> Interventions::cancel(const std::string& id, std::int64_t now_ms,
                                            const std::string& reason) {
  return t_.guarded([&]() -> std::optional<Status> {
    sql::Transaction tx(t_.db());
    const std::optional<Status> before = t_.locked_status(id);
    if (!before) return std::nullopt;
    const std::string history = reason.empty() ? "cancelled" : "cancelled: " + reason;
    if (before == Status::failed) {
      // Closed, not cancelled midway: its parent heard of the failure when it failed, and its
      // children ended with it. The error stays, for whoever looks at it later.
      StatusChange close{Move::close, id, Status::cancelled, now_ms, history, *before};
      lifecycle_.change_status(close.set("crashes", std::int64_t{0}));
    } else {
      waits_.cancel_in(id, now_ms, history);
    }
    tx.commit();
    return before;
  });
}

bool Interventions::retry(const std::string& id, std::int64_t now_ms) {
  return t_.guarded([&] {
    sql::Transaction tx(t_.db());
    const std::optional<Status> current = t_.locked_status(id);
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

std::int64_t Interventions::requeue(const std::string& id, Status from, std::int64_t now_ms,
                                    std::string reason) {
  sql::Query steps(t_.db(),
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
  lifecycle_.change_status(change);
  t_.announce_work();
  return reset;
}

std::vector<std::string> Interventions::forget(const std::string& correlation_id,
                                               std::int64_t now_ms) {
  if (!t_.payloads() || !t_.payloads()->encrypts()) {
    throw Error(errc::config,
                "forget needs the encryption key file (RuntimeOptions::encryption_key_file, the "
                "CLI's --key-file): without encryption there is no data key to destroy");
  }
  std::vector<std::string> cancelled = t_.guarded([&] {
    sql::Transaction tx(t_.db());
    std::vector<std::string> ids;
    {
      sql::Query runs(t_.db(),
                      std::string("SELECT id FROM runs WHERE (correlation_id = ? OR (id = ? "
                                  "AND correlation_id = '')) AND ") +
                          kUnendedStatus);
      runs.bind(1, correlation_id);
      runs.bind(2, correlation_id);
      while (runs.next()) ids.push_back(runs.text(0));
    }
    for (const std::string& id : ids)
      waits_.cancel_in(id, now_ms, "cancelled: its data was forgotten");
    t_.delete_data_key(correlation_id);
    tx.commit();
    return ids;
  });
  if (const auto truncate = t_.db().dialect().truncate_log; !truncate.empty()) {
    t_.guarded([&] { t_.db().execute(std::string(truncate)); });
  }
  return cancelled;
}

}  // namespace durable::detail
