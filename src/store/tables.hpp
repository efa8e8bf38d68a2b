// SPDX-License-Identifier: Apache-2.0
#pragma once
// What every part of the SQL store (store/parts.hpp) works through: the connection, kept
// working across a broken one and a lost conflict (guarded, reading); the locks and notices the
// writers share; the ownership fence of a step body's own writes; and payloads at rest (the
// codec, src/payloads.hpp), through which every payload column is written and read.
//
// Every write is one transaction begun with sql::Connection::begin(). On SQLite that takes the
// file's write lock, so writers are serialized. On a database where writers run side by side
// (PostgreSQL), a transaction first locks the rows its decision rests on (Dialect::lock_row), and
// one that loses a conflict is run again whole (Fault::retry).

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "lifecycle.hpp"
#include "serialization.hpp"
#include "store.hpp"
#include "store/sql.hpp"

namespace durable::detail {

/// The statuses of a run that has not ended and is not paused, as SQL: the predicate of the
/// partial index `runs_claimable`, which the queries that read it repeat verbatim (SQLite uses a
/// partial index only for a query whose terms include its predicate; Statuses::sql says why not
/// an IN list, and docs/performance.md what it cost). PostgreSQL's index keeps its IN list: its
/// planner finds this predicate implies it.
inline const std::string kLiveStatus = kLive.sql();
/// The statuses of a run that has ended, as SQL: the predicate of the partial index `runs_ended`.
inline const std::string kEndedStatus = kEnded.sql();
/// kLiveStatus, or paused: a run that has not ended (the predicate of `runs_deadline`).
inline const std::string kUnendedStatus = kUnended.sql();
/// runs.paused: why a run is paused (or, running, pausing): not at all, by Runtime::pause, or
/// by Runtime::pause_workflow (which resume_workflow undoes).
inline constexpr int kNotPaused = 0;
inline constexpr int kPausedByRun = 1;
inline constexpr int kPausedByWorkflow = 2;

/// Clock::time_point of a time in milliseconds since the Unix epoch.
Clock::time_point to_time(std::int64_t ms);

/// Whether a key (a run id, a filter, a schedule id) could be in the store at all: one that is
/// not is_utf8() was never written, and PostgreSQL would refuse to compare it, so a lookup of it
/// finds nothing on either store.
inline bool findable(std::string_view key) { return is_utf8(key); }

/// A run's tags as runs.tags stores them (a JSON object of strings); what is not a string is
/// left out.
std::map<std::string, std::string> tags_of(const json& stored);

/// The codec's slots of a message ("message:<topic>"), a published value ("published:<key>"), a
/// stream's value ("stream:<name>:<offset>") and a step's payload ("step:<key>:output",
/// "step:<key>:error").
inline std::string message_slot(std::string_view topic) { return "message:" + std::string(topic); }
inline std::string published_slot(std::string_view key) { return "published:" + std::string(key); }
inline std::string stream_slot(std::string_view name, std::int64_t offset) {
  return "stream:" + std::string(name) + ":" + std::to_string(offset);
}
inline std::string step_slot(std::string_view key, std::string_view part) {
  return "step:" + std::string(key) + ":" + std::string(part);
}

class SqlTables {
 public:
  /// Makes a new connection, set up as the first, after the old one broke (Fault::connection).
  using Reconnect = std::function<std::unique_ptr<sql::Connection>()>;
  /// `name` says which database, in messages: "database '<name>': ...".
  SqlTables(std::unique_ptr<sql::Connection> db, std::string name, Reconnect reconnect);

  sql::Connection& db() { return *db_; }
  const sql::Connection& db() const { return *db_; }
  const std::string& name() const { return name_; }
  [[noreturn]] void fail(const std::string& what, ErrorCode code = errc::database) const;
  /// Closes the connection; only a destructor that must outlive it calls this.
  void close() { db_.reset(); }

  /// Runs a call to the database, turning a database failure into an Error that names the
  /// database and says what to do. A transaction that lost a conflict with another writer is
  /// run again, whole. After a broken connection the call fails, and the next call first makes
  /// a new connection: the caller (the worker loop, backing off) goes on once the server is back.
  template <class F>
  std::invoke_result_t<F&> guarded(F&& body) {
    for (int attempt = 1;; ++attempt) {
      if (broken_) restore();
      try {
        return body();
      } catch (const sql::Failure& e) {
        if (e.fault() == sql::Fault::retry && attempt < kConflictAttempts) continue;
        if (e.fault() == sql::Fault::connection) broken_ = true;
        fail_with(e);
      }
    }
  }

  /// guarded(), with the body's statements in one read transaction: what they read is one state
  /// of the database (a run and its journal as they were together), and SQLite takes its read
  /// lock once instead of once per statement.
  template <class F>
  std::invoke_result_t<F&> reading(F&& body) {
    return guarded([&] {
      const sql::ReadTransaction snapshot(db());
      return body();
    });
  }

  /// Where writers run side by side, waits until no other transaction holds `key`, and holds it
  /// until this one ends (Dialect::lock_key); the transactions that decide on the same thing
  /// (the waits of an event name, the running count of a limited workflow) decide one at a time.
  void lock(const std::string& key);
  /// Tells watching workers, at commit, that runs became due (Dialect::notify_work).
  void announce_work();
  /// Sends "RUN_ID/NAME" to the change feeds that listen (PostgreSQL), delivered at commit.
  void announce_change(const std::string& run_id, std::string_view name);
  /// The run's status, its row held (Dialect::lock_row) until the transaction ends.
  std::optional<Status> locked_status(const std::string& id);
  bool run_exists(const std::string& id);
  /// The fence of a step body's own writes (stream values, progress): whether the run is still
  /// running under `owner`, its row locked until the transaction ends.
  bool held_by(const std::string& run_id, const std::string& owner);

  /// The version this process runs (Store::set_version), and whether it claims only runs of it.
  void set_version(const std::string& version, bool only_own) {
    version_ = version;
    only_own_version_ = only_own && !version.empty();
  }
  const std::string& version() const { return version_; }
  bool only_own_version() const { return only_own_version_; }

  // Payloads at rest. encoded() is what to store of a payload's JSON text; payload() the JSON of
  // a stored one, through stored().
  void set_payloads(std::shared_ptr<const Payloads> payloads) {
    // No codec is kept as none at all: stored in the clear, as JSON text.
    const bool clear = payloads == nullptr || payloads->name() == kNoCodec;
    payloads_ = clear ? nullptr : std::move(payloads);
  }
  const Payloads* payloads() const { return payloads_.get(); }
  std::string encoded(const PayloadAt& at, std::string_view text);
  json payload(const PayloadAt& at, const std::string& stored_text);
  /// payload() as JSON text (for a value copied to another row, encoded again there).
  std::string payload_text(const PayloadAt& at, const std::string& stored_text);
  /// The stored form of an error: its message encoded, its type and step id (which filters
  /// compare in SQL) in the clear; error_read() reads it back.
  std::string error_stored(const PayloadAt& at, const ErrorInfo& error);
  ErrorInfo error_read(const PayloadAt& at, const std::string& stored_text);
  /// The correlation id of a run ("" for an unknown run), cached: it never changes.
  std::string correlation_of(std::string_view run_id);
  /// Deletes a data key so that its bytes do not stay in the file (Dialect::secure_delete).
  void delete_data_key(const std::string& owner);

  /// JSON text read back from the database (see tables.cpp). Payloads go through payload().
  json stored(const std::string& text);
  /// What stored() or payload() met since the last take that makes a run unreadable (a value
  /// nested too deep, payloads forgotten); a run holding one is not executed, nor forked.
  std::optional<std::string> take_unreadable() { return std::exchange(unreadable_, std::nullopt); }
  void clear_unreadable() { unreadable_.reset(); }

 private:
  /// Runs of a transaction that loses conflicts (deadlocks, serialization failures) before the
  /// call fails.
  static constexpr int kConflictAttempts = 8;
  class Keys;

  [[noreturn]] void fail_with(const sql::Failure& e) const;
  void restore();
  std::unique_ptr<sql::Connection> db_;
  std::string name_;
  Reconnect reconnect_;
  bool broken_ = false;                    // the connection broke: restore() before the next call
  std::optional<std::string> unreadable_;  // set by stored() and payload_text(): see there
  std::string version_;                    // set_version()
  bool only_own_version_ = false;
  std::shared_ptr<const Payloads> payloads_;  // set_payloads(); null: stored in the clear
  std::map<std::string, std::string, std::less<>> correlations_;  // run id -> correlation id
};

}  // namespace durable::detail
