// SPDX-License-Identifier: Apache-2.0
// Step::transaction in the store: the body runs in a savepoint of the transaction that writes
// its journal entry, so the application's writes and the entry commit together. A body that
// throws has its writes rolled back to the savepoint and its failed attempt written instead;
// the other writes of the transaction (other runs' entries in a group commit) stay.

#include <algorithm>
#include <array>
#include <cctype>

#include "store/sql_store.hpp"

namespace durable::detail {

namespace {

// The first word of a statement, upper-cased, after blanks and comments.
std::string first_word(std::string_view text) {
  std::size_t i = 0;
  for (;;) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (text.substr(i, 2) == "--") {
      i = text.find('\n', i);
      if (i == std::string_view::npos) return {};
    } else if (text.substr(i, 2) == "/*") {
      i = text.find("*/", i + 2);
      if (i == std::string_view::npos) return {};
      i += 2;
    } else {
      break;
    }
  }
  std::string word;
  while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) {
    word += static_cast<char>(std::toupper(static_cast<unsigned char>(text[i++])));
  }
  return word;
}

// Statements that would end, nest or leave the step's transaction, or change the connection.
constexpr std::array<std::string_view, 11> kRefused = {
    "BEGIN", "COMMIT",  "END",    "ROLLBACK", "SAVEPOINT", "RELEASE",
    "ATTACH", "DETACH", "VACUUM", "PRAGMA",   "SET"};

// The durable::Sql of one transaction body: the application's statements on the store's
// connection, checked first. A statement the database refused fails the attempt even when the
// body caught its error (PostgreSQL aborts the transaction at the first error).
class ApplicationSql final : public SqlSession {
 public:
  ApplicationSql(sql::Connection& db, const std::string& name) : db_(&db), name_(&name) {}

  std::int64_t run(std::string_view text, const std::vector<json>& params, json* rows) override {
    const std::string word = first_word(text);
    if (word.empty()) refuse("no SQL statement was given");
    if (std::find(kRefused.begin(), kRefused.end(), word) != kRefused.end()) {
      refuse(word + " is not allowed in a step.transaction body: its SQL runs inside the "
                    "transaction that journals the step, which durable begins and ends");
    }
    try {
      return db_->run_application(text, params, rows);
    } catch (const sql::Failure& e) {
      if (e.fault() != sql::Fault::other) throw;  // the database itself: the whole write fails
      failed_ = "database '" + *name_ + "': " + e.what();
      throw NonRetryableError(failed_);
    }
  }
  /// What the database refused, if anything.
  const std::string& failed() const { return failed_; }

 private:
  [[noreturn]] void refuse(const std::string& why) {
    failed_ = why;
    throw NonRetryableError(why);
  }

  sql::Connection* db_;
  const std::string* name_;
  std::string failed_;
};

}  // namespace

EntryWrite SqlStore::run_transaction(const EntryWrite& write) {
  TransactionStep& tx = *write.transaction;
  db().execute("SAVEPOINT durable_step");
  EntryWrite result;
  std::exception_ptr error;
  try {
    ApplicationSql session(db(), name_);
    result = tx.run(session);
    if (!session.failed().empty()) throw NonRetryableError(session.failed());
    db().execute("RELEASE SAVEPOINT durable_step");
  } catch (const sql::Failure&) {
    throw;  // the database failed, not the body: the whole transaction fails, or runs again
  } catch (const Halted&) {
    throw;  // the crash sweep's crash: nothing of the transaction is written
  } catch (...) {
    error = std::current_exception();
  }
  if (error) {
    db().execute("ROLLBACK TO SAVEPOINT durable_step");
    db().execute("RELEASE SAVEPOINT durable_step");
    result = tx.failed(error);
  }
  result.transaction.reset();
  tx.written = result.entry;
  return result;
}

}  // namespace durable::detail
