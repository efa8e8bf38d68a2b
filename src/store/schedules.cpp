// SPDX-License-Identifier: Apache-2.0
// Schedules: stored once per id and spec, fired once per due time whichever worker fires them
// (the run's idempotency key names the due time), kept when used up.

#include "ids.hpp"
#include "store/parts.hpp"

namespace durable::detail {

namespace {

constexpr const char* kScheduleColumns =
    "SELECT id, workflow, input, every_ms, cron, remaining, next_at, fired, created_at FROM "
    "schedules";

void bind_remaining(sql::Query& query, int index, const std::optional<int>& remaining) {
  if (remaining) {
    query.bind(index, *remaining);
  } else {
    query.bind_null(index);
  }
}

}  // namespace

// Where a schedule's input is stored: it belongs to no run yet, and is encoded under the
// schedule's id.
PayloadAt ScheduleTable::schedule_input(const std::string& id) {
  return {id, "", "schedule-input", false};
}

PayloadAt ScheduleTable::schedule_spec(const std::string& id) {
  return {id, "", "schedule-spec", false};
}

ScheduleRow ScheduleTable::read_schedule(sql::Query& q) {
  ScheduleRow row;
  row.id = q.text(0);
  row.workflow = q.text(1);
  row.input = t_.payload_text(schedule_input(row.id), q.text(2));
  row.every_ms = q.int64(3);
  row.cron = q.text(4);
  if (!q.is_null(5)) row.remaining = q.int32(5);
  row.next_at = q.int64(6);
  row.fired = q.int32(7);
  row.created_at = q.int64(8);
  return row;
}

bool ScheduleTable::put_schedule(const ScheduleRow& row, std::int64_t now_ms) {
  return t_.guarded([&] {
    sql::Transaction tx(t_.db());
    {
      // The spec holds the input, so it is a payload: compared once decoded, not in SQL.
      sql::Query same(t_.db(), "SELECT spec FROM schedules WHERE id = ?" +
                                   std::string(t_.db().dialect().lock_row));
      same.bind(1, row.id);
      if (same.next() && t_.payload_text(schedule_spec(row.id), same.text(0)) == row.spec) {
        return false;
      }
    }
    sql::Query insert(t_.db(),
                      "INSERT INTO schedules (id, workflow, input, every_ms, cron, remaining, "
                      "next_at, fired, created_at, updated_at, spec) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                      "workflow = excluded.workflow, input = excluded.input, "
                      "every_ms = excluded.every_ms, cron = excluded.cron, "
                      "remaining = excluded.remaining, next_at = excluded.next_at, "
                      "fired = excluded.fired, created_at = excluded.created_at, "
                      "updated_at = excluded.updated_at, spec = excluded.spec");
    insert.bind(1, row.id);
    insert.bind(2, row.workflow);
    insert.bind(3, t_.encoded(schedule_input(row.id), row.input));
    insert.bind(4, row.every_ms);
    insert.bind(5, row.cron);
    bind_remaining(insert, 6, row.remaining);
    insert.bind(7, row.next_at);
    insert.bind(8, row.fired);
    insert.bind(9, now_ms);
    insert.bind(10, now_ms);
    insert.bind(11, t_.encoded(schedule_spec(row.id), row.spec));
    insert.run();
    tx.commit();
    return true;
  });
}

bool ScheduleTable::remove_schedule(const std::string& id) {
  return t_.guarded([&] {
    if (!findable(id)) return false;
    sql::Query remove(t_.db(), "DELETE FROM schedules WHERE id = ?");
    remove.bind(1, id);
    return remove.run() > 0;
  });
}

std::vector<ScheduleInfo> ScheduleTable::list_schedules() {
  return t_.guarded([&] {
    std::vector<ScheduleInfo> schedules;
    sql::Query query(t_.db(),
                     std::string(kScheduleColumns) + " WHERE next_at < ? ORDER BY next_at, id");
    query.bind(1, kNever);  // used-up schedules are kept, not listed
    while (query.next()) {
      const ScheduleRow row = read_schedule(query);
      ScheduleInfo info;
      info.id = row.id;
      info.workflow = row.workflow;
      info.input = t_.stored(row.input);
      info.every = std::chrono::milliseconds(row.every_ms);
      info.cron = row.cron;
      info.remaining = row.remaining;
      info.next_at = to_time(row.next_at);
      info.fired = row.fired;
      schedules.push_back(std::move(info));
    }
    return schedules;
  });
}

std::optional<std::int64_t> ScheduleTable::next_schedule_at() {
  return t_.guarded([&]() -> std::optional<std::int64_t> {
    sql::Query query(t_.db(), "SELECT min(next_at) FROM schedules WHERE next_at < ?");
    query.bind(1, kNever);
    if (!query.next() || query.is_null(0)) return std::nullopt;
    return query.int64(0);
  });
}

std::vector<std::string> ScheduleTable::fire_schedules(
    std::int64_t now_ms,
    const std::function<std::optional<std::int64_t>(const ScheduleRow&, std::int64_t)>& next) {
  return t_.guarded([&] {
    std::vector<std::string> started;
    sql::Transaction tx(t_.db());
    std::vector<ScheduleRow> due;
    {
      // Where writers run side by side, the due rows are held: a schedule fires in one of them.
      sql::Query query(t_.db(), std::string(kScheduleColumns) +
                                    " WHERE next_at <= ? ORDER BY next_at" +
                                    std::string(t_.db().dialect().lock_row));
      query.bind(1, now_ms);
      while (query.next()) due.push_back(read_schedule(query));
    }
    for (ScheduleRow& row : due) {
      NewRun run;
      run.id = new_id();
      run.workflow = row.workflow;
      run.correlation_id = new_id();
      // One run per due time of this version of the schedule, whichever runtime fires it.
      run.idempotency_key = "schedule:" + row.id + ":" + std::to_string(row.created_at) + ":" +
                            std::to_string(row.next_at);
      run.input = row.input;
      run.now_ms = run.due_ms = now_ms;
      run.reason = "started by schedule '" + row.id + "'";
      run.debounce = true;
      if (lifecycle_.insert_run(run) == run.id) started.push_back(run.id);
      ++row.fired;
      if (row.remaining) --*row.remaining;
      const std::optional<std::int64_t> after = next(row, now_ms);
      // Used up: kept with a next time that never comes, so that a schedule() repeated with the
      // same id and spec (at each start of a program) does not start it over.
      const std::int64_t next_at =
          (row.remaining && *row.remaining <= 0) || !after ? kNever : *after;
      sql::Query update(t_.db(),
                        "UPDATE schedules SET next_at = ?, remaining = ?, fired = ?, "
                        "updated_at = ? WHERE id = ?");
      update.bind(1, next_at);
      bind_remaining(update, 2, row.remaining);
      update.bind(3, row.fired);
      update.bind(4, now_ms);
      update.bind(5, row.id);
      update.run();
    }
    tx.commit();
    return started;
  });
}

}  // namespace durable::detail
