// SPDX-License-Identifier: Apache-2.0
#pragma once
// sql::Connection on an SQLite database: the connection SqlStore and OpsQueries use on a file.

#include <memory>

#include "store/sql.hpp"

namespace SQLite {
class Database;
}

namespace durable::detail {

/// The SQL the store writes, as SQLite reads it.
extern const sql::Dialect kSqliteDialect;

/// A connection over an open SQLite database, which it owns. Statements are prepared once and
/// kept (preparing costs as much as a small commit); a statement is reset when its use ends, so
/// no half-read statement holds a read snapshot of the WAL open.
std::unique_ptr<sql::Connection> sqlite_connection(std::unique_ptr<SQLite::Database> db);

/// The database a connection made by sqlite_connection() owns.
SQLite::Database& sqlite_database(sql::Connection& connection);

}  // namespace durable::detail
