// SPDX-License-Identifier: Apache-2.0
// The tables the store's parts share: the connection and its recovery, locks and notices, the
// fence of a step body's own writes, and values read back. Payloads at rest are payloads.cpp's.

#include "store/tables.hpp"

#include <utility>

#include "change_watch.hpp"
#include "errors_internal.hpp"
#include "serialization.hpp"

namespace durable::detail {

Clock::time_point to_time(std::int64_t ms) {
  return Clock::time_point(std::chrono::milliseconds(ms));
}

SqlTables::SqlTables(std::unique_ptr<sql::Connection> db, std::string name, Reconnect reconnect)
    : db_(std::move(db)), name_(std::move(name)), reconnect_(std::move(reconnect)) {}

void SqlTables::restore() {
  try {
    db_ = reconnect_();
  } catch (const sql::Failure& e) {
    fail_with(e);
  }
  broken_ = false;
}

void SqlTables::fail(const std::string& what, ErrorCode code) const {
  throw Error(code, "database '" + name_ + "': " + what);
}

void SqlTables::fail_with(const sql::Failure& e) const {
  fail(std::string(e.what()) + sql::advice(e.fault()), sql::code_of(e.fault()));
}

std::map<std::string, std::string> tags_of(const json& stored) {
  std::map<std::string, std::string> tags;
  if (!stored.is_object()) return tags;
  for (const auto& [key, value] : stored.items()) {
    if (value.is_string()) tags[key] = value.get<std::string>();
  }
  return tags;
}

// JSON text read back from the database. Text nested deeper than kMaxStoredDepth can only have
// been written before the limit or by another tool; parsed, it would crash whatever copies or
// writes it on a small stack. It reads as a string saying so, and unreadable_ records it, so
// that claim() fails such a run instead of executing it.
json SqlTables::stored(const std::string& text) {
  if (auto problem = too_deep_text(text, kMaxStoredDepth)) {
    unreadable_ = "a value stored in it cannot be read: " + *problem;
    return "<unreadable: nested more than " + std::to_string(kMaxStoredDepth) + " levels deep>";
  }
  return json::parse(text);
}

bool SqlTables::run_exists(const std::string& id) {
  if (!findable(id)) return false;
  sql::Query query(db(), "SELECT 1 FROM runs WHERE id = ?");
  query.bind(1, id);
  return query.next();
}

void SqlTables::announce_work() {
  const std::string_view statement = db().dialect().notify_work;
  if (statement.empty()) return;
  sql::Query notify(db(), std::string(statement));
  notify.run();
}

void SqlTables::lock(const std::string& key) {
  const std::string_view statement = db().dialect().lock_key;
  if (statement.empty()) return;
  sql::Query query(db(), std::string(statement));
  query.bind(1, key);
  while (query.next()) {
  }
}

std::optional<Status> SqlTables::locked_status(const std::string& id) {
  if (!findable(id)) return std::nullopt;
  sql::Query query(db(),
                   "SELECT status FROM runs WHERE id = ?" + std::string(db().dialect().lock_row));
  query.bind(1, id);
  if (!query.next()) return std::nullopt;
  return status_from_string(query.text(0));
}

void SqlTables::announce_change(const std::string& run_id, std::string_view name) {
  const std::string_view notify = db().dialect().notify_change;
  if (notify.empty()) return;
  sql::Query announce(db(), std::string(notify));
  announce.bind(1, ChangeWatch::topic(run_id, name));
  while (announce.next()) {
  }
}

bool SqlTables::held_by(const std::string& run_id, const std::string& owner) {
  sql::Query owned(db(), "SELECT 1 FROM runs WHERE id = ? AND owner = ? AND status = 'running'" +
                             std::string(db().dialect().lock_row));
  owned.bind(1, run_id);
  owned.bind(2, owner);
  return owned.next();
}

}  // namespace durable::detail
