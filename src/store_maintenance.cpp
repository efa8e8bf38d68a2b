// SPDX-License-Identifier: Apache-2.0
// Housekeeping of a durable database: deleting events no wait can need any more.
//
// Which events a wait can still need. A wait (step.wait_for_event) records `since`, the last
// events.seq stored when the workflow reached it (engine.cpp reads the store's event horizon),
// and counts only events with a higher seq. It finds them in two ways:
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
// And the newest event is never deleted: seq is the rowid, which SQLite would hand out again
// from 1 once the table is empty, and a wait whose since is above it would miss new events.

#include <SQLiteCpp/SQLiteCpp.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

#include "store_sqlite.hpp"

namespace durable::detail {

namespace {

// How far another process's clock may be behind this one's, for the times it wrote.
constexpr std::int64_t kClockMarginMs = 60'000;

// The highest seq that may be deleted: below the oldest since of a registered wait, and below
// the newest event. 0: none.
std::int64_t deletable_seq(SQLite::Database& db) {
  SQLite::Statement newest(db, "SELECT coalesce(max(seq), 0) FROM events");
  newest.executeStep();
  std::int64_t bound = newest.getColumn(0).getInt64() - 1;
  SQLite::Statement waits(db, "SELECT min(since) FROM waits");
  if (waits.executeStep() && !waits.getColumn(0).isNull()) {
    bound = std::min(bound, waits.getColumn(0).getInt64());
  }
  return bound;
}

// When the oldest current claim of a running run was made (nullopt: no run is running). A
// claim writes a history row with status 'running'; the latest such row of a run is its
// current claim.
std::optional<std::int64_t> oldest_claim_ms(SQLite::Database& db) {
  SQLite::Statement query(db,
                          "SELECT min((SELECT max(h.at) FROM history h WHERE h.run_id = r.id "
                          "AND h.status = 'running')) FROM runs r WHERE r.status = 'running'");
  if (!query.executeStep() || query.getColumn(0).isNull()) return std::nullopt;
  return query.getColumn(0).getInt64();
}

}  // namespace

std::size_t purge_events_in(SQLite::Database& db, std::int64_t before_ms, std::size_t limit) {
  if (limit == 0) return 0;
  // IMMEDIATE: the bounds and the delete see the same state, and no wait registers between.
  SQLite::Transaction tx(db, SQLite::TransactionBehavior::IMMEDIATE);
  const std::int64_t max_seq = deletable_seq(db);
  std::int64_t cutoff = before_ms;
  if (const auto claim = oldest_claim_ms(db)) cutoff = std::min(cutoff, *claim - kClockMarginMs);
  SQLite::Statement remove(db,
                           "DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE seq <= ? "
                           "AND at < ? ORDER BY seq LIMIT ?)");
  remove.bind(1, static_cast<int64_t>(max_seq));
  remove.bind(2, static_cast<int64_t>(cutoff));
  remove.bind(3, static_cast<int64_t>(std::min<std::size_t>(
                     limit, static_cast<std::size_t>(std::numeric_limits<int>::max()))));
  const int deleted = remove.exec();
  tx.commit();
  return static_cast<std::size_t>(deleted);
}

}  // namespace durable::detail
