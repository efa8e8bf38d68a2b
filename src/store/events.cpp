// SPDX-License-Identifier: Apache-2.0
// Events and waits: storing an event completes the waits it matches and starts the runs of the
// workflows it triggers, in one transaction; a wait journaled after a matching event was stored
// is completed at once, when it is registered. So neither order of a wait and its event loses
// the event. Where writers run side by side, both transactions first take one lock, "events"
// (SqlTables::lock), held to their commit: the one that commits second sees the other's row, and
// events get their seq in commit order. That order matters beyond one name: a wait counts only
// events after `since`, the highest seq committed when it began, so an event given a lower seq
// but committed later would be missed by it.
//
// Housekeeping: deleting events no wait can need any more. A wait (step.wait_for_event) records
// `since`, the last events.seq stored when the workflow reached it (engine.cpp reads the event
// horizon), and counts only events with a higher seq. It finds them in two ways:
//   1. when its journal entry is committed, register_wait() looks for a matching event with
//      seq > since, stored while the invocation was reaching its commit; from then on
//   2. publish() completes it with each new event, as that event is stored.
// So an event is needed only by a wait whose since is below its seq and that has not yet been
// registered (way 1). Such a wait is either
//   - registered already (a `waits` row): its since is in the row; conservatively, every event
//     after the oldest since of a `waits` row is kept; or
//   - in flight: read by an invocation of a `running` run that has not committed yet, so read
//     after that run's current claim, when every event stored before the claim was already
//     below the horizon. Events stored since the oldest current claim are kept (less a margin
//     for clocks of other processes).
// And the newest event is never deleted: on SQLite seq is the rowid, which would be handed out
// again from 1 once the table is empty, and a wait whose since is above it would miss new events.

#include <algorithm>
#include <limits>
#include <utility>

#include "errors_internal.hpp"
#include "ids.hpp"
#include "store/parts.hpp"

namespace durable::detail {

namespace {

// How far another process's clock may be behind this one's, for the times it wrote.
constexpr std::int64_t kClockMarginMs = 60'000;

// Where an event's data is stored: it belongs to no run. Sent by a run, it is encoded under the
// data key of the run's correlation id; sent from outside, under a key of its own (the event id).
PayloadAt event_data(const std::string& event_id, const std::string& correlation_id) {
  return {event_id, correlation_id, "event-data", false};
}

bool matches(const json& match, const json& data) {
  if (match.empty()) return true;
  if (!data.is_object()) return false;
  for (const auto& [field, value] : match.items()) {
    const auto it = data.find(field);
    if (it == data.end() || *it != value) return false;
  }
  return true;
}

}  // namespace

Published Waits::publish(const NewEvent& event) {
  return t_.guarded([&] {
    sql::Transaction tx(t_.db());
    Published result = publish_in(event);
    tx.commit();
    return result;
  });
}

// Stores an event inside the caller's transaction and delivers it.
Published Waits::publish_in(const NewEvent& event) {
  t_.lock("events");
  Published result;
  {
    sql::Query insert(t_.db(),
                      "INSERT INTO events (id, name, data, at, correlation_id) "
                      "VALUES (?, ?, ?, ?, ?) RETURNING seq");
    insert.bind(1, event.id);
    insert.bind(2, event.name);
    insert.bind(3, t_.encoded(event_data(event.id, event.correlation_id), event.data));
    insert.bind(4, event.now_ms);
    insert.bind_text_or_null(5, event.correlation_id);
    if (!insert.next()) bug("event " + event.id + " was stored with no sequence number");
    result.seq = insert.int64(0);
    while (insert.next()) {
    }
  }
  const json data = t_.stored(event.data);
  const json full = {
      {"id", event.id}, {"name", event.name}, {"data", data}, {"time", event.now_ms}};
  std::vector<std::pair<std::string, std::string>> matched;  // run, key
  {
    sql::Query waits(t_.db(), "SELECT run_id, key, match FROM waits WHERE event = ? AND since < ?");
    waits.bind(1, event.name);
    waits.bind(2, result.seq);
    while (waits.next()) {
      std::string run = waits.text(0), key = waits.text(1);
      if (matches(t_.payload({run, "", step_slot(key, "match")}, waits.text(2)), data)) {
        matched.emplace_back(std::move(run), std::move(key));
      }
    }
  }
  for (const auto& [run, key] : matched) {
    if (complete_wait(run, key, full, event.now_ms)) {
      wake(run, event.now_ms, "event '" + event.name + "' arrived (" + key + ")");
      ++result.woken;
    }
  }
  std::vector<std::string> workflows;
  {
    sql::Query triggers(t_.db(), "SELECT workflow FROM triggers WHERE event = ?");
    triggers.bind(1, event.name);
    while (triggers.next()) workflows.push_back(triggers.text(0));
  }
  for (const std::string& workflow : workflows) {
    NewRun run;
    run.id = new_id();
    run.workflow = workflow;
    run.correlation_id = new_id();
    run.idempotency_key = "event:" + event.id;
    run.input = full.dump();
    run.now_ms = run.due_ms = event.now_ms;
    run.reason = "started by event '" + event.name + "'";
    run.debounce = true;
    run.traceparent = event.traceparent;
    result.started.push_back(lifecycle_.insert_run(run));
  }
  return result;
}

// A new wait of a run's journal: registered for the events to come, and completed at once by one
// stored since the wait began (sent while the invocation was reaching the wait).
bool Waits::register_wait(const std::string& run_id, const JournalEntry& e, std::int64_t now_ms) {
  const std::string event = e.output.value("event", "");
  const json match = e.output.value("match", json::object());
  const std::int64_t since = e.output.value("since", std::int64_t{0});
  t_.lock("events");
  {
    sql::Query insert(t_.db(),
                      "INSERT INTO waits (run_id, key, event, match, since) VALUES (?, ?, ?, ?, ?) "
                      "ON CONFLICT (run_id, key) DO UPDATE SET event = excluded.event, "
                      "match = excluded.match, since = excluded.since");
    insert.bind(1, run_id);
    insert.bind(2, e.key);
    insert.bind(3, event);
    insert.bind(4, t_.encoded({run_id, "", step_slot(e.key, "match")}, match.dump()));
    insert.bind(5, since);
    insert.run();
  }
  std::optional<json> found;
  {
    sql::Query earlier(t_.db(),
                       "SELECT id, data, at, coalesce(correlation_id, '') FROM events WHERE "
                       "name = ? AND seq > ? ORDER BY seq");
    earlier.bind(1, event);
    earlier.bind(2, since);
    while (earlier.next()) {
      json data = t_.payload(event_data(earlier.text(0), earlier.text(3)), earlier.text(1));
      if (!matches(match, data)) continue;
      found = json{{"id", earlier.text(0)},
                   {"name", event},
                   {"data", std::move(data)},
                   {"time", earlier.int64(2)}};
      break;
    }
  }
  return found && complete_wait(run_id, e.key, *found, now_ms);
}

// Completes a waiting event step with the event (null: timed out); false if it was not waiting.
bool Waits::complete_wait(const std::string& run_id, const std::string& key, const json& event,
                          std::int64_t now_ms) {
  sql::Query update(t_.db(),
                    "UPDATE steps SET state = 'completed', output = ?, updated_at = ? "
                    "WHERE run_id = ? AND key = ? AND state = 'waiting'");
  if (event.is_null()) {
    update.bind_null(1);
  } else {
    update.bind(1, t_.encoded({run_id, "", step_slot(key, "output")}, event.dump()));
  }
  update.bind(2, now_ms);
  update.bind(3, run_id);
  update.bind(4, key);
  const bool completed = update.run() > 0;
  sql::Query remove(t_.db(), "DELETE FROM waits WHERE run_id = ? AND key = ?");
  remove.bind(1, run_id);
  remove.bind(2, key);
  remove.run();
  return completed;
}

// Completes the event waits and receives of a run whose timeout passed, with nothing. A receive
// and a send racing for it update the same waiting row: one of them finds it waiting.
void Waits::time_out_waits(const std::string& id, std::int64_t now_ms) {
  std::vector<std::string> keys;
  {
    sql::Query query(t_.db(),
                     "SELECT key FROM steps WHERE run_id = ? AND kind IN ('event', 'receive') "
                     "AND state = 'waiting' AND wake_at <= ?");
    query.bind(1, id);
    query.bind(2, now_ms);
    while (query.next()) keys.push_back(query.text(0));
  }
  for (const std::string& key : keys) complete_wait(id, key, json(), now_ms);
}

// A waiting run whose wait is over becomes pending, due now.
void Waits::wake(const std::string& id, std::int64_t now_ms, const std::string& reason) {
  StatusChange change{Move::wake, id, Status::pending, now_ms, reason, Status::waiting};
  if (lifecycle_.change_status(change.set("due_at", now_ms))) {
    t_.announce_work();
    return;
  }
  // A run paused while it waited goes on, once resumed, with what came meanwhile.
  sql::Query paused(t_.db(),
                    "UPDATE runs SET paused_from = 'pending', due_at = ?, updated_at = ? "
                    "WHERE id = ? AND status = 'paused' AND paused_from = 'waiting'");
  paused.bind(1, now_ms);
  paused.bind(2, now_ms);
  paused.bind(3, id);
  if (paused.run() > 0)
    lifecycle_.add_history(id, now_ms, Status::paused, reason + "; it stays paused");
}

std::int64_t Waits::event_horizon() {
  return t_.guarded([&] {
    sql::Query query(t_.db(), "SELECT coalesce(max(seq), 0) FROM events");
    query.next();
    return query.int64(0);
  });
}

void Waits::register_workflow(const std::string& workflow, const std::vector<std::string>& events,
                              const std::string& flow, std::int64_t now_ms) {
  t_.guarded([&] {
    sql::Transaction tx(t_.db());
    {
      sql::Query known(t_.db(),
                       "INSERT INTO workflows (name, seen_at, flow) VALUES (?, ?, ?) "
                       "ON CONFLICT (name) DO UPDATE SET seen_at = excluded.seen_at, "
                       "flow = excluded.flow");
      known.bind(1, workflow);
      known.bind(2, now_ms);
      known.bind_text_or_null(3, flow);
      known.run();
    }
    {
      sql::Query remove(t_.db(), "DELETE FROM triggers WHERE workflow = ?" +
                                     (events.empty() ? std::string()
                                                     : " AND event NOT IN (" +
                                                           sql::placeholders(events.size()) + ")"));
      remove.bind(1, workflow);
      int i = 2;
      for (const std::string& event : events) remove.bind(i++, event);
      remove.run();
    }
    for (const std::string& event : events) {
      sql::Query insert(t_.db(),
                        "INSERT INTO triggers (event, workflow) VALUES (?, ?) "
                        "ON CONFLICT DO NOTHING");
      insert.bind(1, event);
      insert.bind(2, workflow);
      insert.run();
    }
    tx.commit();
    return 0;
  });
}

std::size_t Waits::purge_events(std::int64_t before_ms, std::size_t limit) {
  if (limit == 0) return 0;
  return t_.guarded([&] {
    // One write transaction: the bounds and the delete see the same state.
    sql::Transaction tx(t_.db(), sql::Sync::journal);
    std::int64_t max_seq = 0;  // below the newest event and the oldest since of a wait
    {
      sql::Query newest(t_.db(), "SELECT coalesce(max(seq), 0) FROM events");
      newest.next();
      max_seq = newest.int64(0) - 1;
    }
    {
      sql::Query waits(t_.db(), "SELECT min(since) FROM waits");
      if (waits.next() && !waits.is_null(0)) max_seq = std::min(max_seq, waits.int64(0));
    }
    // The oldest current claim of a running run: a claim writes a history row with status
    // 'running'; the latest such row of a run is its current claim.
    std::int64_t cutoff = before_ms;
    {
      sql::Query claims(t_.db(),
                        "SELECT min((SELECT max(h.at) FROM history h WHERE h.run_id = r.id "
                        "AND h.status = 'running')) FROM runs r WHERE r.status = 'running'");
      if (claims.next() && !claims.is_null(0)) {
        cutoff = std::min(cutoff, claims.int64(0) - kClockMarginMs);
      }
    }
    const std::string doomed =
        "SELECT seq FROM events WHERE seq <= ? AND at < ? ORDER BY seq LIMIT ?";
    const std::int64_t most = static_cast<std::int64_t>(
        std::min<std::size_t>(limit, static_cast<std::size_t>(std::numeric_limits<int>::max())));
    {  // the data keys of events sent from outside go with them (whatever this process's codec)
      sql::Query keys(t_.db(),
                      "DELETE FROM data_keys WHERE owner IN (SELECT 'event:' || id FROM "
                      "events WHERE correlation_id IS NULL AND seq IN (" +
                          doomed + "))");
      keys.bind(1, max_seq);
      keys.bind(2, cutoff);
      keys.bind(3, most);
      keys.run();
    }
    sql::Query remove(t_.db(), "DELETE FROM events WHERE seq IN (" + doomed + ")");
    remove.bind(1, max_seq);
    remove.bind(2, cutoff);
    remove.bind(3, most);
    const std::int64_t deleted = remove.run();
    tx.commit();
    return static_cast<std::size_t>(deleted);
  });
}

}  // namespace durable::detail
