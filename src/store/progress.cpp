// SPDX-License-Identifier: Apache-2.0
// The progress step bodies report (StepContext::heartbeat): the last one per step, written
// while its run is the writer's, read by the step's next attempt and by operators.

#include "store/sql_store.hpp"

namespace durable::detail {

// Inside the group's transaction. Only the run's owner writes: not a body its runtime gave up
// on after losing the run.
bool SqlStore::save_progress(const ProgressWrite& p) {
  if (!held_by(p.run_id, p.owner)) return false;
  sql::Query upsert(db(),
                    "INSERT INTO step_progress (run_id, step_key, attempt, progress, at) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id, step_key) DO UPDATE SET "
                    "attempt = excluded.attempt, progress = excluded.progress, at = excluded.at");
  upsert.bind(1, p.run_id);
  upsert.bind(2, p.key);
  upsert.bind(3, static_cast<std::int64_t>(p.attempt));
  upsert.bind(4, encoded({p.run_id, "", step_slot(p.key, "progress")}, p.progress));
  upsert.bind(5, p.now_ms);
  upsert.run();
  return true;
}

StepProgress SqlStore::read_progress(sql::Query& q, const std::string& run_id) {
  StepProgress p;
  p.step = q.text(0);
  p.attempt = q.int32(1);
  p.progress = payload({run_id, "", step_slot(p.step, "progress")}, q.text(2));
  p.at = to_time(q.int64(3));
  return p;
}

std::optional<StepProgress> SqlStore::progress(const std::string& run_id, const std::string& key) {
  return guarded([&]() -> std::optional<StepProgress> {
    sql::Query q(db(),
                 "SELECT step_key, attempt, progress, at FROM step_progress "
                 "WHERE run_id = ? AND step_key = ?");
    q.bind(1, run_id);
    q.bind(2, key);
    if (!q.next()) return std::nullopt;
    return read_progress(q, run_id);
  });
}

std::vector<StepProgress> SqlStore::progress_of(const std::string& run_id) {
  return guarded([&] {
    // A completed step's progress is history: its result says more.
    sql::Query q(db(),
                 "SELECT p.step_key, p.attempt, p.progress, p.at FROM step_progress p "
                 "WHERE p.run_id = ?1 AND NOT EXISTS (SELECT 1 FROM steps s WHERE "
                 "s.run_id = ?1 AND s.key = p.step_key AND s.state = 'completed') "
                 "ORDER BY p.step_key");
    q.bind(1, run_id);
    std::vector<StepProgress> all;
    while (q.next()) all.push_back(read_progress(q, run_id));
    return all;
  });
}

}  // namespace durable::detail
