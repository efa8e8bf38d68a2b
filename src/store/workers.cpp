// SPDX-License-Identifier: Apache-2.0
// The workers that claim runs: registered with what identifies their process on its host, a
// heartbeat, and the owners of running runs, so that a claimer on the same host can tell that
// one died and take its runs at once (across hosts, the lease tells); and the renewal of the
// leases of the runs a worker holds, with its heartbeat.

#include "store/parts.hpp"

namespace durable::detail {

namespace {

std::vector<Worker> read_workers(sql::Query& query) {
  std::vector<Worker> workers;
  while (query.next()) {
    workers.push_back({query.text(0), query.text(1), query.int64(2), query.int64(3)});
  }
  return workers;
}

}  // namespace

void WorkerTable::register_worker(const Worker& worker, std::int64_t now_ms) {
  t_.guarded([&] { put_worker(worker, now_ms, now_ms, std::nullopt, ""); });
}

void WorkerTable::touch_worker(const Worker& worker, std::int64_t now_ms, std::int64_t lease_ms,
                               const std::string& counters) {
  t_.guarded([&] {
    // Relaxed: when a power cut loses it, the worker that was seen is gone as well.
    sql::Transaction tx(t_.db(), sql::Sync::relaxed);
    touch(worker, now_ms, lease_ms, counters);
    tx.commit();
  });
}

void WorkerTable::touch(const Worker& worker, std::int64_t now_ms, std::int64_t lease_ms,
                        const std::string& counters) {
  sql::Query seen(t_.db(),
                  "UPDATE workers SET seen_at = ?, lease_ms = ?, counters = ? WHERE id = ?");
  seen.bind(1, now_ms);
  seen.bind(2, lease_ms);
  seen.bind_text_or_null(3, counters);
  seen.bind(4, worker.id);
  if (seen.run() == 0) {
    // The row is gone: another worker forgot this one while it was stalled past kForgetLeases,
    // and it is live again.
    put_worker(worker, worker.started_at_ms != 0 ? worker.started_at_ms : now_ms, now_ms, lease_ms,
               counters);
  }
}

void WorkerTable::put_worker(const Worker& worker, std::int64_t started_at_ms,
                             std::int64_t seen_at_ms, std::optional<std::int64_t> lease_ms,
                             const std::string& counters) {
  sql::Query put(t_.db(),
                 "INSERT INTO workers (id, host, pid, start_ticks, started_at, seen_at, lease_ms, "
                 "counters) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                 "host = excluded.host, pid = excluded.pid, start_ticks = excluded.start_ticks, "
                 "started_at = excluded.started_at, seen_at = excluded.seen_at, "
                 "lease_ms = excluded.lease_ms, counters = excluded.counters");
  put.bind(1, worker.id);
  put.bind(2, worker.host);
  put.bind(3, worker.pid);
  put.bind(4, worker.start_ticks);
  put.bind(5, started_at_ms);
  put.bind(6, seen_at_ms);
  if (lease_ms) {
    put.bind(7, *lease_ms);
  } else {
    put.bind_null(7);
  }
  put.bind_text_or_null(8, counters);
  put.run();
}

std::size_t WorkerTable::forget_dead_workers(std::int64_t now_ms) {
  return t_.guarded([&] {
    // The silent ones first, from the small workers table; then each is deleted unless it owns
    // a running run, in a statement of its own, so the runs table is looked at only for them.
    std::vector<std::string> silent;
    {
      sql::Query query(t_.db(),
                       "SELECT id FROM workers WHERE seen_at + ? * coalesce(lease_ms, ?) <= ?");
      query.bind(1, kForgetLeases);
      query.bind(2, kDefaultLeaseMs);
      query.bind(3, now_ms);
      while (query.next()) silent.push_back(query.text(0));
    }
    std::size_t forgotten = 0;
    for (const std::string& id : silent) forgotten += remove_if_idle(id) ? 1 : 0;
    if (const std::string_view fold = t_.db().dialect().fold_counts; !fold.empty()) {
      sql::Query query(t_.db(), std::string(fold));
      while (query.next()) {
      }
    }
    return forgotten;
  });
}

std::vector<Worker> WorkerTable::workers_on(const std::string& host) {
  return t_.guarded([&] {
    sql::Query query(t_.db(), "SELECT id, host, pid, start_ticks FROM workers WHERE host = ?");
    query.bind(1, host);
    return read_workers(query);
  });
}

void WorkerTable::remove_idle_worker(const std::string& id) {
  t_.guarded([&] { return remove_if_idle(id); });
}

bool WorkerTable::remove_if_idle(const std::string& id) {
  sql::Query remove(t_.db(),
                    "DELETE FROM workers WHERE id = ?1 AND NOT EXISTS "
                    "(SELECT 1 FROM runs WHERE owner = ?1 AND status = 'running')");
  remove.bind(1, id);
  return remove.run() > 0;
}

std::vector<Worker> WorkerTable::running_owners(const std::string& self) {
  return t_.guarded([&] {
    sql::Query query(t_.db(),
                     "SELECT w.id, w.host, w.pid, w.start_ticks FROM workers w WHERE w.id IN "
                     "(SELECT DISTINCT owner FROM runs WHERE status = 'running' AND owner != ?)");
    query.bind(1, self);
    return read_workers(query);
  });
}

// Inside the group's transaction: relaxed, as a claim, when alone in it (a renewal lost to a
// power cut went with the worker that made it).
void WorkerTable::renew_leases(const std::string& owner, const std::vector<std::string>& ids,
                               std::int64_t until_ms) {
  if (ids.empty()) return;
  sql::Query renew(t_.db(),
                   "UPDATE runs SET due_at = ? WHERE status = 'running' AND owner = ? AND id IN (" +
                       sql::placeholders(ids.size()) + ")");
  renew.bind(1, until_ms);
  renew.bind(2, owner);
  bind_all(renew, 3, ids);
  renew.run();
}

}  // namespace durable::detail
