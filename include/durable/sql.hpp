// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The application's SQL inside a step's own journal transaction (Step::transaction).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace durable {

using json = nlohmann::json;

namespace detail {
/// What a store gives Sql: one statement run in the transaction under way.
class SqlSession {
 public:
  virtual ~SqlSession() = default;
  /// Runs one statement with its parameters bound; the rows it returns (each an object of
  /// column name to value) go to `rows` when not null. Returns the rows it changed.
  virtual std::int64_t run(std::string_view text, const std::vector<json>& params,
                           json* rows) = 0;
};
struct SqlAccess;
}  // namespace detail

/// The application's SQL in the transaction that journals a step (Step::transaction): on
/// SQLite the application's tables in durable's file, on PostgreSQL those of durable's database.
/// One statement per call, with `$1`, `$2`, ... placeholders on both stores; parameters (any
/// value that converts to JSON: numbers, text, bool, null; arrays and objects as JSON text) are
/// bound, never spliced. Valid during the step body's call only.
///
/// Refused with durable::Error, and so failing the attempt: SQL that ends or nests the
/// transaction (BEGIN, COMMIT, END, ROLLBACK, SAVEPOINT, RELEASE), ATTACH, DETACH, VACUUM and
/// PRAGMA, more than one statement in a call, and writes to durable's own tables. An error of
/// the database is thrown as durable::Error with its message.
class Sql {
 public:
  Sql(const Sql&) = delete;
  Sql& operator=(const Sql&) = delete;

  /// Runs a statement that returns no rows (INSERT, UPDATE, DELETE, CREATE TABLE...); returns
  /// how many rows it changed.
  template <class... Params>
  std::int64_t exec(std::string_view text, Params&&... params) {
    return call(text, {json(std::forward<Params>(params))...}, nullptr);
  }
  /// Runs a statement and returns its rows, as an array of objects of column name to value:
  /// integers, reals, text, and null (SQLite blobs as text).
  template <class... Params>
  json query(std::string_view text, Params&&... params) {
    json rows = json::array();
    call(text, {json(std::forward<Params>(params))...}, &rows);
    return rows;
  }

 private:
  friend struct detail::SqlAccess;
  Sql(detail::SqlSession& session, std::string step) : session_(&session), step_(std::move(step)) {}
  std::int64_t call(std::string_view text, const std::vector<json>& params, json* rows);
  detail::SqlSession* session_;  // null once the body's call has ended
  std::string step_;             // the step's journal key, for messages
};

}  // namespace durable
