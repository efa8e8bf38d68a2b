// SPDX-License-Identifier: Apache-2.0
// Opening a database file: telling an operator what is wrong when it cannot be opened, and a
// read connection that writes nothing beside the file.
//
// Why SQLite's extended code and the OS errno, not the message text: "disk I/O error" is what
// SQLite says both for a full disk (SQLITE_IOERR_SHMSIZE while growing the -shm) and for a
// failing one, and "unable to open database file" both for a read-only mount and a missing
// directory. The codes tell them apart; the text does not.

#include <SQLiteCpp/SQLiteCpp.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "sqlite_store.hpp"

namespace durable::detail {

namespace {

OpenFault from_errno(int system_errno) {
  switch (system_errno) {
    case EACCES:
    case EPERM:
    case EROFS:
      return OpenFault::not_writable;
    case ENOSPC:
    case EDQUOT:
      return OpenFault::disk_full;
    default:
      return OpenFault::other;
  }
}

std::string os_reason(int system_errno) {
  if (system_errno == 0) return "";
  return std::string(", ") + std::strerror(system_errno);
}

}  // namespace

OpenFault classify_open_error(int extended_code, int system_errno) {
  const int primary = extended_code & 0xFF;
  // The errno is the most specific witness: a CANTOPEN or IOERR caused by EROFS or ENOSPC.
  if (const OpenFault by_errno = from_errno(system_errno); by_errno != OpenFault::other) {
    if (primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR || primary == SQLITE_READONLY ||
        primary == SQLITE_FULL || primary == SQLITE_PERM || primary == SQLITE_AUTH) {
      return by_errno;
    }
  }
  switch (primary) {
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return OpenFault::not_writable;
    case SQLITE_FULL:
      return OpenFault::disk_full;
    case SQLITE_NOTADB:
      return OpenFault::not_sqlite;
    case SQLITE_CORRUPT:
      return OpenFault::corrupt;
    case SQLITE_IOERR:
      // Growing the -shm (the WAL index) fails this way on a full disk; a plain write error has
      // its own subcode and no ENOSPC.
      return extended_code == SQLITE_IOERR_SHMSIZE ? OpenFault::disk_full : OpenFault::io_error;
    default:
      return OpenFault::other;
  }
}

std::string open_error_message(const std::string& path, int extended_code, int system_errno,
                               const std::string& sqlite_text) {
  const std::string cause = " (" + sqlite_text + os_reason(system_errno) + ")";
  const std::string where = "database '" + path + "': ";
  switch (classify_open_error(extended_code, system_errno)) {
    case OpenFault::not_writable:
      return where + "cannot open or write the file" + cause +
             ". Check that this user may read and write it, its directory and the -wal and -shm "
             "files beside it, and that its file system is not mounted read-only; read-only "
             "commands (durable runs, show, steps, stats) work without write access";
    case OpenFault::disk_full:
      return where + "the disk is full" + cause +
             "; nothing was written. Free space on its file system, then retry";
    case OpenFault::not_sqlite:
      return where + "not a durable database: the file is not an SQLite database at all" + cause +
             "; it was left untouched. Point RuntimeOptions::database (or --db) at another file";
    case OpenFault::corrupt:
      return where + "the database is corrupt" + cause +
             "; it was left untouched. Restore it from a backup, or run `sqlite3 '" + path +
             "' .recover` into a new file";
    case OpenFault::io_error:
      return where + "the file could not be read or written" + cause +
             ": a failing disk or a file changed underneath. Check the system log and the disk";
    case OpenFault::other:
      break;
  }
  return where + "cannot be opened" + cause;
}

// Why this user cannot write the file or make files beside it, by asking the OS (0: it can).
// SQLite's own errno is not always the telling one: it retries a -shm it cannot create
// read-write (EROFS) read-only, and reports that attempt's ENOENT.
int write_errno(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  for (const std::string& probe : {path, dir.string()}) {
    if (::access(probe.c_str(), W_OK) != 0 && errno != ENOENT) return errno;
  }
  return 0;
}

Error open_error(const std::string& path, const SQLite::Exception& e, sqlite3* handle) {
  int system_errno = handle != nullptr ? sqlite3_system_errno(handle) : 0;
  if (classify_open_error(e.getExtendedErrorCode(), system_errno) == OpenFault::not_writable &&
      from_errno(system_errno) != OpenFault::not_writable) {
    if (const int why = write_errno(path); why != 0) system_errno = why;
  }
  // A failed sqlite3_open leaves no handle to ask for the errno; a missing directory is the
  // common case there, and not a matter of permissions.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ignored;
  if (handle == nullptr && e.getErrorCode() == SQLITE_CANTOPEN && !parent.empty() &&
      !std::filesystem::is_directory(parent, ignored)) {
    return Error(
        errc::database,
        "database '" + path + "': its directory '" + parent.string() +
            "' does not exist. Create it, or point RuntimeOptions::database (or --db) at a "
            "file in a directory that exists");
  }
  return Error(errc::database,
               open_error_message(path, e.getExtendedErrorCode(), system_errno, e.what()));
}

// A file with no -wal beside it is read as immutable, so that nothing is created next to it (a
// recorded database kept in a source tree stays alone, and a file on a read-only mount, where
// no -shm can be made, can be read). No -wal beside a WAL database means no connection has it
// open. With a -wal, another process may be writing to it: it is read through the WAL, as any
// reader would.
std::unique_ptr<SQLite::Database> open_sqlite_reader(const std::string& path) {
  std::error_code ignored;
  if (!std::filesystem::is_regular_file(path, ignored)) {
    throw Error(errc::database, "database '" + path + "' does not exist");
  }
  std::string uri = "file:";
  for (const char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      static constexpr char kHex[] = "0123456789ABCDEF";
      uri += '%';
      uri += kHex[static_cast<unsigned char>(c) >> 4];
      uri += kHex[c & 0xF];
    } else {
      uri += c;
    }
  }
  uri += std::filesystem::exists(path + "-wal", ignored) ? "?mode=ro" : "?immutable=1";
  try {
    return std::make_unique<SQLite::Database>(uri, SQLite::OPEN_READONLY | SQLite::OPEN_URI);
  } catch (const SQLite::Exception& e) {
    throw open_error(path, e, nullptr);
  }
}

}  // namespace durable::detail
