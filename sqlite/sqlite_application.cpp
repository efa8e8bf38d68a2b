// SPDX-License-Identifier: Apache-2.0
#include "sqlite_application.hpp"

#include <sqlite3.h>

#include <array>
#include <cctype>
#include <memory>

#include "store/sql.hpp"

namespace durable::detail {

namespace {

constexpr std::array<std::string_view, 21> kTables = {
    "runs",       "steps",       "history",          "events",
    "waits",      "triggers",    "schedules",        "workflows",
    "workers",    "run_tags",    "paused_workflows", "step_progress",
    "run_counts", "step_counts", "step_buckets",     "step_figures",
    "published",  "messages",    "streams",          "stream_values",
    "data_keys"};

[[noreturn]] void refuse(const std::string& why) { throw sql::Failure(sql::Fault::other, why); }

// The end of a quoted span that begins at text[i] with `quote` (doubled quotes stay inside).
std::size_t after_quoted(std::string_view text, std::size_t i, char close) {
  for (std::size_t j = i + 1; j < text.size(); ++j) {
    if (text[j] != close) continue;
    if (j + 1 < text.size() && text[j + 1] == close && close != ']') {
      ++j;
      continue;
    }
    return j + 1;
  }
  return text.size();
}

// What the authorizer refused while the statement was prepared, for the message.
struct Authorizer {
  std::string refused;

  static int check(void* self, int action, const char* a, const char* b, const char*, const char*) {
    auto* me = static_cast<Authorizer*>(self);
    const auto deny = [&](const std::string& why) {
      if (me->refused.empty()) me->refused = why;
      return SQLITE_DENY;
    };
    const auto durable = [](const char* name) { return name != nullptr && is_durable_table(name); };
    const auto own = [&](const char* name) {
      return deny(std::string("a step.transaction body may not write or change durable's own "
                              "table '") +
                  name + "'");
    };
    switch (action) {
      case SQLITE_TRANSACTION:
      case SQLITE_SAVEPOINT:
        return deny("a step.transaction body may not begin, end or nest a transaction");
      case SQLITE_ATTACH:
      case SQLITE_DETACH:
        return deny("a step.transaction body may not ATTACH or DETACH a database");
      case SQLITE_PRAGMA:
        return deny("a step.transaction body may not run a PRAGMA");
      // The table is the first name: writes, and tables or views made or dropped under a name
      // of durable's (a temporary one would hide durable's own from its statements).
      case SQLITE_INSERT:
      case SQLITE_UPDATE:
      case SQLITE_DELETE:
      case SQLITE_CREATE_TABLE:
      case SQLITE_CREATE_TEMP_TABLE:
      case SQLITE_CREATE_VIEW:
      case SQLITE_CREATE_TEMP_VIEW:
      case SQLITE_DROP_TABLE:
      case SQLITE_DROP_TEMP_TABLE:
      case SQLITE_DROP_VIEW:
      case SQLITE_DROP_TEMP_VIEW:
      case SQLITE_CREATE_VTABLE:
        return durable(a) ? own(a) : SQLITE_OK;
      // The table is the second name (ALTER: the database, then the table): indexes and
      // triggers on a table of durable's fire inside its own writes.
      case SQLITE_ALTER_TABLE:
      case SQLITE_CREATE_INDEX:
      case SQLITE_CREATE_TEMP_INDEX:
      case SQLITE_DROP_INDEX:
      case SQLITE_DROP_TEMP_INDEX:
      case SQLITE_CREATE_TRIGGER:
      case SQLITE_CREATE_TEMP_TRIGGER:
      case SQLITE_DROP_TRIGGER:
      case SQLITE_DROP_TEMP_TRIGGER:
        return durable(b) ? own(b) : SQLITE_OK;
      default:
        return SQLITE_OK;
    }
  }
};

void bind(sqlite3* db, sqlite3_stmt* statement, int index, const json& value) {
  int code = SQLITE_OK;
  switch (value.type()) {
    case json::value_t::null:
      code = sqlite3_bind_null(statement, index);
      break;
    case json::value_t::boolean:
      code = sqlite3_bind_int64(statement, index, value.get<bool>() ? 1 : 0);
      break;
    case json::value_t::number_integer:
      code = sqlite3_bind_int64(statement, index, value.get<std::int64_t>());
      break;
    case json::value_t::number_unsigned:
      if (value.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
        refuse("parameter $" + std::to_string(index) + " is larger than a 64-bit integer");
      }
      code = sqlite3_bind_int64(statement, index, value.get<std::int64_t>());
      break;
    case json::value_t::number_float:
      code = sqlite3_bind_double(statement, index, value.get<double>());
      break;
    case json::value_t::string: {
      const auto& text = value.get_ref<const std::string&>();
      code = sqlite3_bind_text64(statement, index, text.data(), text.size(), SQLITE_TRANSIENT,
                                 SQLITE_UTF8);
      break;
    }
    default: {  // arrays and objects as their JSON text
      const std::string text = value.dump();
      code = sqlite3_bind_text64(statement, index, text.data(), text.size(), SQLITE_TRANSIENT,
                                 SQLITE_UTF8);
    }
  }
  if (code != SQLITE_OK) refuse(sqlite3_errmsg(db));
}

json column(sqlite3_stmt* statement, int i) {
  switch (sqlite3_column_type(statement, i)) {
    case SQLITE_NULL:
      return nullptr;
    case SQLITE_INTEGER:
      return sqlite3_column_int64(statement, i);
    case SQLITE_FLOAT:
      return sqlite3_column_double(statement, i);
    default: {
      const auto* data = reinterpret_cast<const char*>(sqlite3_column_text(statement, i));
      return data == nullptr
                 ? std::string()
                 : std::string(data, static_cast<std::size_t>(sqlite3_column_bytes(statement, i)));
    }
  }
}

// Whether only blanks, comments and semicolons are left.
bool only_blanks(std::string_view rest) {
  std::size_t i = 0;
  while (i < rest.size()) {
    if (std::isspace(static_cast<unsigned char>(rest[i])) || rest[i] == ';') {
      ++i;
    } else if (rest.substr(i, 2) == "--") {
      i = rest.find('\n', i);
      if (i == std::string_view::npos) return true;
    } else if (rest.substr(i, 2) == "/*") {
      i = rest.find("*/", i + 2);
      if (i == std::string_view::npos) return true;
      i += 2;
    } else {
      return false;
    }
  }
  return true;
}

// A conflict resolved by ROLLBACK (INSERT OR ROLLBACK, a column's ON CONFLICT ROLLBACK, a
// trigger's RAISE(ROLLBACK)) ends the whole transaction the step's entry is written in: the
// write must be made again, without this body's SQL.
void ended_check(sqlite3* db) {
  if (sqlite3_get_autocommit(db) != 0) {
    throw sql::Failure(sql::Fault::ended,
                       "the step's SQL rolled back the transaction that journals it (a conflict "
                       "resolved by ROLLBACK, or RAISE(ROLLBACK)), which it may not end");
  }
}

}  // namespace

bool is_durable_table(std::string_view name) {
  for (std::string_view t : kTables) {
    if (t.size() != name.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < t.size() && same; ++i) {
      same = t[i] == std::tolower(static_cast<unsigned char>(name[i]));
    }
    if (same) return true;
  }
  return false;
}

std::string sqlite_parameters(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    std::size_t end = i + 1;
    if (c == '\'' || c == '"' || c == '`') {
      end = after_quoted(text, i, c);
    } else if (c == '[') {
      end = after_quoted(text, i, ']');
    } else if (text.substr(i, 2) == "--") {
      end = text.find('\n', i);
      if (end == std::string_view::npos) end = text.size();
    } else if (text.substr(i, 2) == "/*") {
      end = text.find("*/", i + 2);
      end = end == std::string_view::npos ? text.size() : end + 2;
    } else if (c == '$' && i + 1 < text.size() &&
               std::isdigit(static_cast<unsigned char>(text[i + 1]))) {
      out += '?';
      ++i;
      continue;
    } else if (c == '?' || c == ':' || c == '@' || c == '$') {
      refuse(std::string("parameters are written $1, $2, ...; '") + c + "' is not one (at offset " +
             std::to_string(i) + ")");
    }
    out.append(text.substr(i, end - i));
    i = end;
  }
  return out;
}

std::int64_t run_sqlite_application(sqlite3* db, std::string_view text,
                                    const std::vector<json>& params, json* rows) {
  const std::string sql = sqlite_parameters(text);
  Authorizer authorizer;
  sqlite3_set_authorizer(db, &Authorizer::check, &authorizer);
  sqlite3_stmt* raw = nullptr;
  const char* tail = nullptr;
  const int code = sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &raw, &tail);
  sqlite3_set_authorizer(db, nullptr, nullptr);
  const std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> statement(raw, sqlite3_finalize);
  if (!authorizer.refused.empty()) refuse(authorizer.refused);
  if (code != SQLITE_OK) refuse(sqlite3_errmsg(db));
  if (raw == nullptr) refuse("no SQL statement was given");
  if (!only_blanks(std::string_view(tail, sql.c_str() + sql.size() - tail))) {
    refuse("one SQL statement per call: the text goes on after the first one");
  }
  const int wanted = sqlite3_bind_parameter_count(raw);
  if (static_cast<std::size_t>(wanted) != params.size()) {
    refuse("the statement takes " + std::to_string(wanted) + " parameter(s); " +
           std::to_string(params.size()) + " were given");
  }
  for (int i = 0; i < wanted; ++i) bind(db, raw, i + 1, params[static_cast<std::size_t>(i)]);
  const int columns = sqlite3_column_count(raw);
  for (;;) {
    const int step = sqlite3_step(raw);
    if (step == SQLITE_DONE) break;
    if (step != SQLITE_ROW) {
      ended_check(db);
      const int primary = step & 0xFF;
      const sql::Fault fault = primary == SQLITE_FULL ? sql::Fault::disk_full
                               : primary == SQLITE_BUSY || primary == SQLITE_LOCKED
                                   ? sql::Fault::busy
                                   : sql::Fault::other;
      throw sql::Failure(fault, sqlite3_errmsg(db));
    }
    if (rows == nullptr) continue;
    json row = json::object();
    for (int i = 0; i < columns; ++i) row[sqlite3_column_name(raw, i)] = column(raw, i);
    rows->push_back(std::move(row));
  }
  ended_check(db);
  return sqlite3_stmt_readonly(raw) ? 0 : sqlite3_changes64(db);
}

}  // namespace durable::detail
