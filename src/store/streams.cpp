// SPDX-License-Identifier: Apache-2.0
// Streams (Step::write_stream): the values a run appends, each at the next offset, and whether
// the run closed the stream. A workflow function's write is applied in the transaction that
// journals its entry, so a replay, which writes no new entry, appends nothing; a step body's is
// written in the runtime's group commit, made while the run is still its writer's. Each change is
// announced to the change feeds that listen (PostgreSQL) as "RUN_ID/NAME".

#include "run_requests.hpp"
#include "store/parts.hpp"

namespace durable::detail {

std::optional<bool> RunOutputs::run_has_ended(const std::string& run_id) {
  if (!findable(run_id)) return std::nullopt;  // never written
  sql::Query run(t_.db(), "SELECT status FROM runs WHERE id = ?");
  run.bind(1, run_id);
  if (!run.next()) return std::nullopt;
  const std::optional<Status> status = status_from_string(run.text(0));
  return status && ended(*status);
}

bool RunOutputs::append_stream(const std::string& run_id, const std::string& name,
                               const std::optional<std::string>& value, std::int64_t now_ms) {
  std::int64_t length = 0;
  {
    sql::Query stream(t_.db(), "SELECT length, closed FROM streams WHERE run_id = ? AND name = ?" +
                                   std::string(t_.db().dialect().lock_row));
    stream.bind(1, run_id);
    stream.bind(2, name);
    if (stream.next()) {
      if (stream.int64(1) != 0) return false;  // closed: nothing more comes
      length = stream.int64(0);
    }
  }
  if (value) {
    sql::Query append(t_.db(),
                      "INSERT INTO stream_values (run_id, name, pos, value, written_at) "
                      "VALUES (?, ?, ?, ?, ?)");
    append.bind(1, run_id);
    append.bind(2, name);
    append.bind(3, length);
    const std::string slot = stream_slot(name, length);
    append.bind(4, t_.encoded({run_id, "", slot}, *value));
    append.bind(5, now_ms);
    append.run();
  }
  sql::Query upsert(t_.db(),
                    "INSERT INTO streams (run_id, name, length, closed, updated_at) "
                    "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (run_id, name) DO UPDATE SET "
                    "length = excluded.length, closed = excluded.closed, "
                    "updated_at = excluded.updated_at");
  upsert.bind(1, run_id);
  upsert.bind(2, name);
  upsert.bind(3, length + (value ? 1 : 0));
  upsert.bind(4, std::int64_t{value ? 0 : 1});
  upsert.bind(5, now_ms);
  upsert.run();
  t_.announce_change(run_id, name);
  return true;
}

// Inside the group's transaction. Only the run's writer: not a body its runtime gave up on, nor
// one of a run that ended.
StreamWrite RunOutputs::write_stream(const StreamValue& v) {
  if (!t_.held_by(v.run_id, v.owner)) return StreamWrite::not_owner;
  if (!append_stream(v.run_id, v.stream, v.value, v.now_ms)) return StreamWrite::closed;
  return StreamWrite::written;
}

StreamRows RunOutputs::read_stream(const std::string& run_id, const std::string& name,
                                   std::int64_t from, std::size_t limit) {
  return t_.reading([&] {
    StreamRows rows;
    const std::optional<bool> ended = run_has_ended(run_id);
    if (!ended) return rows;
    rows.run_found = true;
    rows.closed = *ended;
    if (!findable(name)) return rows;  // never written
    {
      sql::Query stream(t_.db(),
                        "SELECT length, closed FROM streams WHERE run_id = ? AND name = ?");
      stream.bind(1, run_id);
      stream.bind(2, name);
      if (!stream.next()) return rows;
      rows.length = stream.int64(0);
      rows.closed = rows.closed || stream.int64(1) != 0;
    }
    if (from >= rows.length || limit == 0) return rows;
    sql::Query values(t_.db(),
                      "SELECT pos, value FROM stream_values WHERE run_id = ? AND name = ? AND "
                      "pos >= ? ORDER BY pos LIMIT ?");
    values.bind(1, run_id);
    values.bind(2, name);
    values.bind(3, from);
    values.bind(4, static_cast<std::int64_t>(limit));
    while (values.next()) {
      const std::string slot = stream_slot(name, values.int64(0));
      rows.values.push_back(t_.payload_text({run_id, "", slot}, values.text(1)));
    }
    return rows;
  });
}

std::optional<std::vector<StreamSummary>> RunOutputs::streams_of(const std::string& run_id) {
  return t_.reading([&]() -> std::optional<std::vector<StreamSummary>> {
    const std::optional<bool> ended = run_has_ended(run_id);
    if (!ended) return std::nullopt;
    std::vector<StreamSummary> streams;
    sql::Query q(t_.db(),
                 "SELECT name, length, closed, updated_at FROM streams WHERE run_id = ? "
                 "ORDER BY name");
    q.bind(1, run_id);
    while (q.next()) {
      streams.push_back({q.text(0), q.int64(1), *ended || q.int64(2) != 0, q.int64(3)});
    }
    return streams;
  });
}

}  // namespace durable::detail
