// SPDX-License-Identifier: Apache-2.0
// Run control: an operator's pause and resume of a run or of a whole workflow, and the
// deadlines past which runs fail.
//
// A paused run keeps its due time (a sleep's wake time, a wait's timeout) and remembers the
// status it goes back to (runs.paused_from). A running run cannot be paused under its worker's
// feet: it is marked (runs.paused) and its worker pauses it at its next step boundary (see
// Commits::apply), or a worker that takes it over from a dead owner does (claims.cpp).

#include "durations.hpp"
#include "errors_internal.hpp"
#include "run_requests.hpp"
#include "serialization.hpp"
#include "store/parts.hpp"

namespace durable::detail {

std::optional<Status> Interventions::pause(const std::string& id, std::int64_t now_ms) {
  return t_.guarded([&]() -> std::optional<Status> {
    sql::Transaction tx(t_.db());
    const std::optional<Status> before = t_.locked_status(id);
    if (!before) return std::nullopt;
    if (ended(*before)) {
      throw RunStateRefused("run " + id + " is " + std::string(to_string(*before)) +
                            "; only a run that has not ended can be paused");
    }
    if (*before == Status::running) {
      // Its worker pauses it at its next step boundary.
      sql::Query mark(t_.db(), "UPDATE runs SET paused = ? WHERE id = ?");
      mark.bind(1, kPausedByRun);
      mark.bind(2, id);
      mark.run();
    } else if (*before == Status::paused) {
      // Paused by its workflow, now by hand as well: resume_workflow leaves it paused.
      sql::Query mark(t_.db(), "UPDATE runs SET paused = ? WHERE id = ?");
      mark.bind(1, kPausedByRun);
      mark.bind(2, id);
      mark.run();
    } else {
      pause_in(id, *before, kPausedByRun, now_ms, "paused");
    }
    tx.commit();
    return before;
  });
}

std::optional<Status> Interventions::resume(const std::string& id, std::int64_t now_ms) {
  return t_.guarded([&]() -> std::optional<Status> {
    sql::Transaction tx(t_.db());
    const std::optional<Status> before = t_.locked_status(id);
    if (!before) return std::nullopt;
    if (*before == Status::paused) {
      resume_in(id, now_ms, "resumed");
    } else {
      sql::Query unmark(t_.db(),
                        "UPDATE runs SET paused = 0 WHERE id = ? AND status = 'running' AND "
                        "paused != 0");
      unmark.bind(1, id);
      if (unmark.run() == 0) {
        throw RunStateRefused("run " + id + " is " + std::string(to_string(*before)) +
                              "; only a paused run can be resumed");
      }
    }
    tx.commit();
    return before;
  });
}

bool Interventions::pause_in(const std::string& id, Status before, int by, std::int64_t now_ms,
                             const std::string& reason) {
  StatusChange change{Move::pause, id, Status::paused, now_ms, reason, before};
  change.set("paused", std::int64_t{by})
      .set("paused_from", std::string(to_string(before)))
      .set_null("owner");
  return lifecycle_.change_status(change);
}

void Interventions::resume_in(const std::string& id, std::int64_t now_ms,
                              const std::string& reason) {
  Status to = Status::pending;
  {
    sql::Query query(t_.db(), "SELECT coalesce(paused_from, 'pending') FROM runs WHERE id = ?");
    query.bind(1, id);
    if (query.next()) to = status_from_string(query.text(0)).value_or(Status::pending);
  }
  // A pending run keeps its start time (a delayed start); one with none is due now.
  StatusChange change{Move::resume, id, to, now_ms, reason, Status::paused};
  change.set("paused", std::int64_t{kNotPaused})
      .set_null("paused_from")
      .set_sql(
          "due_at = CASE WHEN due_at IS NULL AND paused_from = 'pending' THEN ? ELSE "
          "due_at END",
          now_ms);
  if (lifecycle_.change_status(change)) t_.announce_work();
}

std::size_t Interventions::pause_workflow(const std::string& workflow, std::int64_t now_ms) {
  return t_.guarded([&] {
    sql::Transaction tx(t_.db());
    // One pause or resume of the workflow at a time. A start racing this transaction, where
    // writers run side by side, may insert its run pending; claims leave out the runs of paused
    // workflows (claims.cpp), so it waits all the same.
    t_.lock("workflow:" + workflow);
    {
      sql::Query insert(t_.db(),
                        "INSERT INTO paused_workflows (name, at) VALUES (?, ?) "
                        "ON CONFLICT (name) DO NOTHING");
      insert.bind(1, workflow);
      insert.bind(2, now_ms);
      insert.run();
    }
    std::vector<std::pair<std::string, Status>> runs;
    {
      sql::Query query(t_.db(), "SELECT id, status FROM runs WHERE workflow = ? AND " +
                                    std::string(kLiveStatus) +
                                    std::string(t_.db().dialect().lock_row));
      query.bind(1, workflow);
      while (query.next()) {
        runs.emplace_back(query.text(0),
                          status_from_string(query.text(1)).value_or(Status::pending));
      }
    }
    std::size_t paused = 0;
    for (const auto& [id, status] : runs) {
      if (status == Status::running) {
        sql::Query mark(t_.db(), "UPDATE runs SET paused = ? WHERE id = ? AND paused = 0");
        mark.bind(1, kPausedByWorkflow);
        mark.bind(2, id);
        paused += mark.run() > 0 ? 1 : 0;
      } else if (pause_in(id, status, kPausedByWorkflow, now_ms,
                          "paused with its workflow '" + workflow + "'")) {
        ++paused;
      }
    }
    tx.commit();
    return paused;
  });
}

std::size_t Interventions::resume_workflow(const std::string& workflow, std::int64_t now_ms) {
  return t_.guarded([&] {
    sql::Transaction tx(t_.db());
    t_.lock("workflow:" + workflow);
    {
      sql::Query remove(t_.db(), "DELETE FROM paused_workflows WHERE name = ?");
      remove.bind(1, workflow);
      remove.run();
    }
    // The pausing runs first: one whose worker is pausing it meanwhile (where writers run side
    // by side) is waited for, found paused, and then resumed by the query after.
    sql::Query unmark(t_.db(),
                      "UPDATE runs SET paused = 0 WHERE workflow = ? AND status = 'running' AND "
                      "paused = ?");
    unmark.bind(1, workflow);
    unmark.bind(2, kPausedByWorkflow);
    const std::int64_t pausing = unmark.run();
    std::vector<std::string> ids;
    {
      sql::Query query(t_.db(),
                       "SELECT id FROM runs WHERE workflow = ? AND status = 'paused' AND "
                       "paused = ?" +
                           std::string(t_.db().dialect().lock_row));
      query.bind(1, workflow);
      query.bind(2, kPausedByWorkflow);
      while (query.next()) ids.push_back(query.text(0));
    }
    for (const std::string& id : ids) {
      resume_in(id, now_ms, "resumed with its workflow '" + workflow + "'");
    }
    tx.commit();
    return ids.size() + static_cast<std::size_t>(pausing);
  });
}

std::vector<std::string> Interventions::paused_workflows() {
  return t_.guarded([&] { return lifecycle_.read_paused_workflows(); });
}

std::vector<std::string> Interventions::expire(std::int64_t now_ms, std::size_t limit) {
  return t_.guarded([&] {
    sql::Transaction tx(t_.db());
    std::vector<std::tuple<std::string, std::string, std::int64_t>> due;
    {
      sql::Query query(t_.db(),
                       "SELECT id, status, deadline_at FROM runs WHERE deadline_at IS NOT NULL "
                       "AND " +
                           std::string(kUnendedStatus) +
                           " AND deadline_at <= ? ORDER BY deadline_at LIMIT ?" +
                           std::string(t_.db().dialect().lock_claimable));
      query.bind(1, now_ms);
      query.bind(2, static_cast<std::int64_t>(limit));
      while (query.next()) due.emplace_back(query.text(0), query.text(1), query.int64(2));
    }
    std::vector<std::string> failed;
    for (const auto& [id, status, deadline] : due) {
      const std::string message = "run " + id + " passed its deadline (" + utc_text(deadline) +
                                  ") while " + status + "; it was failed there";
      const ErrorInfo error{"durable::TimeoutError", with_id(errc::timeout, message), {}, 0};
      if (waits_.end_in(id, Status::failed, error, now_ms, message)) failed.push_back(id);
    }
    tx.commit();
    return failed;
  });
}

std::optional<std::int64_t> Interventions::next_deadline() {
  return t_.guarded([&]() -> std::optional<std::int64_t> {
    sql::Query query(t_.db(),
                     "SELECT min(deadline_at) FROM runs WHERE deadline_at IS NOT NULL AND " +
                         std::string(kUnendedStatus));
    if (!query.next() || query.is_null(0)) return std::nullopt;
    return query.int64(0);
  });
}

std::size_t Interventions::delete_runs(const std::vector<std::string>& ids) {
  if (ids.empty()) return 0;
  return t_.guarded([&] {
    sql::Transaction tx(t_.db());
    std::vector<std::string> ended;
    {
      sql::Query query(
          t_.db(), "SELECT id FROM runs WHERE id IN (" + sql::placeholders(ids.size()) + ") AND " +
                       std::string(kEndedStatus) + std::string(t_.db().dialect().lock_row));
      int i = 1;
      for (const std::string& id : ids) query.bind(i++, id);
      while (query.next()) ended.push_back(query.text(0));
    }
    if (!ended.empty()) {
      const std::string in = " IN (" + sql::placeholders(ended.size()) + ")";
      for (const char* table : {"steps", "history", "waits", "run_tags", "step_progress",
                                "published", "messages", "streams", "stream_values"}) {
        sql::Query remove(t_.db(), std::string("DELETE FROM ") + table + " WHERE run_id" + in);
        int i = 1;
        for (const std::string& id : ended) remove.bind(i++, id);
        remove.run();
      }
      sql::Query remove(t_.db(), "DELETE FROM runs WHERE id" + in);
      int i = 1;
      for (const std::string& id : ended) remove.bind(i++, id);
      remove.run();
    }
    tx.commit();
    // A file made with auto_vacuum = INCREMENTAL (every file this build creates) shrinks here;
    // on another the pages stay free for reuse. The runs are deleted whatever comes of it: a
    // busy or failing file gives its pages back at the next purge.
    if (const std::string_view reclaim = t_.db().dialect().reclaim_space;
        !ended.empty() && !reclaim.empty()) {
      try {
        sql::Query query(t_.db(), std::string(reclaim));
        while (query.next()) {
        }
      } catch (const sql::Failure&) {
      }
    }
    return ended.size();
  });
}

std::vector<std::string> Interventions::ended_before(std::int64_t before_ms, std::size_t limit) {
  return t_.guarded([&] {
    std::vector<std::string> ids;
    sql::Query query(t_.db(), "SELECT id FROM runs WHERE " + std::string(kEndedStatus) +
                                  " AND updated_at < ? ORDER BY updated_at LIMIT ?");
    query.bind(1, before_ms);
    query.bind(2, static_cast<std::int64_t>(limit));
    while (query.next()) ids.push_back(query.text(0));
    return ids;
  });
}

}  // namespace durable::detail
