// SPDX-License-Identifier: Apache-2.0
// The application's SQL on a PostgreSQL connection (Step::transaction): run with the
// application's own search_path rather than durable's schema, with text parameters, and checked
// against writes to durable's tables by what the transaction's statistics say it changed.

#include <libpq-fe.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "pg_connection.hpp"

namespace durable::detail::pg {

namespace {

// Rows inserted, updated and deleted so far in this transaction, per table of durable's schema.
constexpr const char* kWrites =
    "SELECT relname, n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_xact_user_tables WHERE "
    "schemaname = current_schema()";

std::string text_of(const json& value, int index) {
  switch (value.type()) {
    case json::value_t::boolean:
      return value.get<bool>() ? "true" : "false";
    case json::value_t::string:
      return value.get<std::string>();
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
    case json::value_t::array:
    case json::value_t::object:
      return value.dump();
    default:
      throw sql::Failure(sql::Fault::other,
                         "parameter $" + std::to_string(index) + " has no SQL value");
  }
}

json column(pg_result* result, int row, int i) {
  if (PQgetisnull(result, row, i)) return nullptr;
  const std::string text(PQgetvalue(result, row, i),
                         static_cast<std::size_t>(PQgetlength(result, row, i)));
  switch (PQftype(result, i)) {
    case 16:  // bool
      return text == "t";
    case 20:  // int8
    case 21:  // int2
    case 23:  // int4
      return std::stoll(text);
    case 700:   // float4
    case 701:   // float8
    case 1700:  // numeric
      return std::stod(text);
    case 114:   // json
    case 3802:  // jsonb
      return json::parse(text, nullptr, false);
    default:
      return text;
  }
}

// The end of a dollar quote's opening tag ($$, $tag$) at text[i], or 0 when there is none.
std::size_t dollar_tag_end(std::string_view text, std::size_t i) {
  if (text[i] != '$' || (i > 0 && (std::isalnum(static_cast<unsigned char>(text[i - 1])) ||
                                   text[i - 1] == '_'))) {
    return 0;
  }
  std::size_t j = i + 1;
  if (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) return 0;  // $1
  while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) {
    ++j;
  }
  return j < text.size() && text[j] == '$' ? j + 1 : 0;
}

// Whether the text names durable's schema (`durable.runs`, `"durable".steps`) outside quoted
// text and comments: its tables are durable's alone.
bool names_schema(std::string_view text, std::string_view schema) {
  const auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return out;
  };
  const std::string wanted = lower(schema);
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    std::string word;
    std::size_t end = i + 1;
    if (c == '"') {
      end = text.find('"', i + 1);
      end = end == std::string_view::npos ? text.size() : end + 1;
      word = std::string(text.substr(i + 1, end - i - 2));
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (end < text.size() &&
             (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) {
        ++end;
      }
      word = lower(text.substr(i, end - i));
    } else if (c == '\'') {
      end = text.find('\'', i + 1);
      end = end == std::string_view::npos ? text.size() : end + 1;
    }
    std::size_t next = end;
    while (next < text.size() && std::isspace(static_cast<unsigned char>(text[next]))) ++next;
    if (!word.empty() && word == wanted && next < text.size() && text[next] == '.') return true;
    i = end;
  }
  return false;
}

// The highest `$N` in the text, outside quoted text and comments: the server refuses a count
// of parameters that differs with a protocol error, which would end the connection.
int highest_parameter(std::string_view text) {
  int highest = 0;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\'' || c == '"') {
      // E'...' strings escape with a backslash; the others double the quote.
      const bool escapes = c == '\'' && i > 0 && (text[i - 1] == 'E' || text[i - 1] == 'e');
      std::size_t j = i + 1;
      while (j < text.size() && text[j] != c) j += escapes && text[j] == '\\' ? 2 : 1;
      i = std::min(j + 1, text.size());
    } else if (const std::size_t tag_end = dollar_tag_end(text, i); tag_end != 0) {
      // $tag$ ... $tag$: a string, whatever it holds.
      const std::string_view tag = text.substr(i, tag_end - i);
      const std::size_t close = text.find(tag, tag_end);
      i = close == std::string_view::npos ? text.size() : close + tag.size();
    } else if (text.substr(i, 2) == "--") {
      const std::size_t end = text.find('\n', i);
      i = end == std::string_view::npos ? text.size() : end;
    } else if (text.substr(i, 2) == "/*") {
      const std::size_t end = text.find("*/", i + 2);
      i = end == std::string_view::npos ? text.size() : end + 2;
    } else if (c == '$' && i + 1 < text.size() &&
               std::isdigit(static_cast<unsigned char>(text[i + 1]))) {
      int n = 0;
      for (++i; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
        n = std::min(n * 10 + (text[i] - '0'), 1 << 20);
      }
      highest = std::max(highest, n);
    } else {
      ++i;
    }
  }
  return highest;
}

}  // namespace

std::map<std::string, std::int64_t> PgConnection::durable_writes() {
  std::map<std::string, std::int64_t> counts;
  const ResultHandle result = exec(kWrites, "reading the transaction's writes");
  for (int row = 0; row < PQntuples(result.get()); ++row) {
    counts[PQgetvalue(result.get(), row, 0)] = std::stoll(PQgetvalue(result.get(), row, 1));
  }
  return counts;
}

std::int64_t PgConnection::run_application(std::string_view text,
                                           const std::vector<json>& params, json* rows) {
  const int wanted = highest_parameter(text);
  if (static_cast<std::size_t>(wanted) != params.size()) {
    throw sql::Failure(sql::Fault::other, "the statement takes " + std::to_string(wanted) +
                                              " parameter(s); " + std::to_string(params.size()) +
                                              " were given");
  }
  {
    const ResultHandle schema = exec("SELECT current_schema()", "reading durable's schema");
    if (names_schema(text, PQgetvalue(schema.get(), 0, 0))) {
      throw sql::Failure(sql::Fault::other,
                         std::string("a step.transaction body may not use durable's own "
                                     "schema '") +
                             PQgetvalue(schema.get(), 0, 0) + "'");
    }
  }
  const std::map<std::string, std::int64_t> before = durable_writes();
  // Unqualified names are the application's: its role's and database's own search_path. A
  // deferred constraint is checked at the statement, not at the commit of every run's writes.
  const ResultHandle saved = exec(
      "SET CONSTRAINTS ALL IMMEDIATE; SELECT current_setting('search_path'), "
      "set_config('search_path', (SELECT reset_val FROM pg_settings WHERE name = "
      "'search_path'), true)",
      "setting the application's search_path");
  const std::string durable_path = PQgetvalue(saved.get(), 0, 0);
  std::vector<std::string> values;
  values.reserve(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const json& value = params[i];
    values.push_back(value.is_null() ? std::string() : text_of(value, static_cast<int>(i + 1)));
  }
  std::vector<const char*> pointers;
  for (std::size_t i = 0; i < params.size(); ++i) {
    pointers.push_back(params[i].is_null() ? nullptr : values[i].c_str());
  }
  const std::string statement(text);
  const ResultHandle result = checked(
      PQexecParams(connection_.get(), statement.c_str(), static_cast<int>(pointers.size()),
                   nullptr, pointers.data(), nullptr, nullptr, 0),
      "running the step's SQL");
  if (PQtransactionStatus(connection_.get()) != PQTRANS_INTRANS) {
    throw sql::Failure(sql::Fault::ended,
                       "the step's SQL ended the transaction that journals it, which it may not");
  }
  // For the session, not only the transaction: the body may have set it for the session.
  const char* path = durable_path.c_str();
  checked(PQexecParams(connection_.get(), "SELECT set_config('search_path', $1, false)", 1,
                       nullptr, &path, nullptr, nullptr, 0),
          "setting durable's search_path again");
  for (const auto& [table, writes] : durable_writes()) {
    const auto was = before.find(table);
    if (writes != (was == before.end() ? 0 : was->second)) {
      throw sql::Failure(sql::Fault::other,
                         "a step.transaction body may not write durable's own table '" + table +
                             "'");
    }
  }
  if (rows != nullptr) {
    const int columns = PQnfields(result.get());
    for (int row = 0; row < PQntuples(result.get()); ++row) {
      json object = json::object();
      for (int i = 0; i < columns; ++i) {
        object[PQfname(result.get(), i)] = column(result.get(), row, i);
      }
      rows->push_back(std::move(object));
    }
  }
  const char* changed = PQcmdTuples(result.get());
  return changed != nullptr && *changed != '\0' ? std::stoll(changed) : 0;
}

}  // namespace durable::detail::pg
