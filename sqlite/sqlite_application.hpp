// SPDX-License-Identifier: Apache-2.0
#pragma once
// The application's SQL on an SQLite connection (Step::transaction): `$1`, `$2`... parameters,
// one statement per call, no writes to durable's own tables.

#include <cstdint>
#include <durable/options.hpp>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3;

namespace durable::detail {

/// The tables durable's SQLite schema has (the application may read them, never write them).
bool is_durable_table(std::string_view name);

/// `text` with its `$N` parameters as SQLite's `?N`, outside quoted text and comments. Throws
/// sql::Failure (other) for a parameter of another form (`?`, `:name`, `@name`, `$name`).
std::string sqlite_parameters(std::string_view text);

/// Runs one statement of application SQL in the transaction under way (sql::Connection::
/// run_application).
std::int64_t run_sqlite_application(sqlite3* db, std::string_view text,
                                    const std::vector<json>& params, json* rows);

}  // namespace durable::detail
