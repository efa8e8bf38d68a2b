// SPDX-License-Identifier: Apache-2.0
// The progress step bodies report (StepContext::heartbeat): the last one per step, written
// while its run is the writer's, read by the step's next attempt and by operators.

#include "store/parts.hpp"

namespace durable::detail {

// Inside the group's transaction. Only the run's owner writes: not a body its runtime gave up
// on after losing the run.
bool RunOutputs::save_progress(const ProgressWrite& p) {
  if (!t_.held_by(p.run_id, p.owner)) return false;
  sql::Query upsert(t_.db(),
                    "INSERT INTO step_progress (run_id, step_key, attempt, progress, at) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id, step_key) DO UPDATE SET "
                    "attempt = excluded.attempt, progress = excluded.progress, at = excluded.at");
  upsert.bind(1, p.run_id);
  upsert.bind(2, p.key);
  upsert.bind(3, static_cast<std::int64_t>(p.attempt));
  upsert.bind(4, t_.encoded({p.run_id, "", step_slot(p.key, "progress")}, p.progress));
  upsert.bind(5, p.now_ms);
  upsert.run();
  return true;
}

StepProgress RunOutputs::read_progress(sql::Query& q, const std::string& run_id) {
  StepProgress p;
  p.step = q.text(0);
  p.attempt = q.int32(1);
  p.progress = t_.payload({run_id, "", step_slot(p.step, "progress")}, q.text(2));
  p.at = to_time(q.int64(3));
  return p;
}

std::optional<StepProgress> RunOutputs::progress(const std::string& run_id,
                                                 const std::string& key) {
  return t_.guarded([&]() -> std::optional<StepProgress> {
    sql::Query q(t_.db(),
                 "SELECT step_key, attempt, progress, at FROM step_progress "
                 "WHERE run_id = ? AND step_key = ?");
    q.bind(1, run_id);
    q.bind(2, key);
    if (!q.next()) return std::nullopt;
    return read_progress(q, run_id);
  });
}

std::vector<StepProgress> RunOutputs::progress_of(const std::string& run_id) {
  return t_.guarded([&] {
    // A completed step's progress is history: its result says more.
    sql::Query q(t_.db(),
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
