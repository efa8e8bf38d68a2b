// SPDX-License-Identifier: Apache-2.0
#pragma once
// What only the SQLite store and its helpers share: telling why a file cannot be opened, and a
// read connection that writes nothing beside the file. store.hpp, the interface the engine,
// runtime and admin layer use, names no SQLite type.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "store.hpp"

struct sqlite3;
namespace SQLite {
class Database;
class Exception;
}  // namespace SQLite

namespace durable::detail {

/// What is wrong with a database file that could not be opened, from SQLite's extended result
/// code and the OS errno behind it (0: unknown).
enum class OpenFault { not_writable, disk_full, not_sqlite, corrupt, io_error, other };
OpenFault classify_open_error(int extended_code, int system_errno);
/// "database 'PATH': <what is wrong> (<SQLite's words>). <what to do>", for an Error.
std::string open_error_message(const std::string& path, int extended_code, int system_errno,
                               const std::string& sqlite_text);
/// The Error for an SQLite failure while opening `path`; `handle` (may be null) gives the errno.
Error open_error(const std::string& path, const SQLite::Exception& e, sqlite3* handle);
/// A read-only connection to an existing file that creates nothing beside it when it can (see
/// sqlite_open.cpp). Throws Error for a missing file or one SQLite cannot open.
std::unique_ptr<SQLite::Database> open_sqlite_reader(const std::string& path);

}  // namespace durable::detail
