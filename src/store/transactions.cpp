// SPDX-License-Identifier: Apache-2.0
// Step::transaction in the store: the body runs in a savepoint of the transaction that writes
// its journal entry, so the application's writes and the entry commit together. A body that
// throws has its writes rolled back to the savepoint and its failed attempt written instead;
// the other writes of the transaction (other runs' entries in a group commit) stay.

#include <algorithm>
#include <array>
#include <cctype>

#include "store/parts.hpp"

namespace durable::detail {

namespace {

// The first word of a statement, upper-cased, after blanks and comments; `i` ends after it.
std::string first_word(std::string_view text, std::size_t& i) {
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

std::string first_word(std::string_view text) {
  std::size_t i = 0;
  return first_word(text, i);
}

// Statements that would end, nest or leave the step's transaction, or change the connection.
constexpr std::array<std::string_view, 22> kRefused = {
    "BEGIN",      "START",  "COMMIT",   "END",    "ROLLBACK", "ABORT",     "SAVEPOINT", "RELEASE",
    "ATTACH",     "DETACH", "VACUUM",   "PRAGMA", "SET",      "RESET",     "DISCARD",   "PREPARE",
    "DEALLOCATE", "LISTEN", "UNLISTEN", "COPY",   "LOAD",     "CHECKPOINT"};

// The durable::Sql of one transaction body: the application's statements on the store's
// connection, checked first. A statement the database refused fails the attempt even when the
// body caught its error (PostgreSQL aborts the transaction at the first error).
class ApplicationSql final : public SqlSession {
 public:
  ApplicationSql(sql::Connection& db, const std::string& name) : db_(&db), name_(&name) {}

  std::int64_t run(std::string_view text, const std::vector<json>& params, json* rows) override {
    if (!ended_.empty()) throw NonRetryableError(ended_);  // nothing runs outside the transaction
    const std::string word = first_word(text);
    if (word.empty()) refuse("no SQL statement was given");
    if (std::find(kRefused.begin(), kRefused.end(), word) != kRefused.end()) {
      refuse(word +
             " is not allowed in a step.transaction body: its SQL runs inside the "
             "transaction that journals the step, which durable begins and ends");
    }
    // A temporary table or view lives on durable's connection, where it could stand in for
    // one of durable's own tables in durable's statements.
    std::size_t after = 0;
    first_word(text, after);
    if (const std::string second = first_word(text.substr(after));
        word == "CREATE" && (second == "TEMP" || second == "TEMPORARY")) {
      refuse("CREATE " + second +
             " is not allowed in a step.transaction body: a temporary "
             "object would outlive it on durable's own connection");
    }
    try {
      return db_->run_application(text, params, rows);
    } catch (const sql::Failure& e) {
      if (e.fault() == sql::Fault::ended) {
        ended_ = e.what();
        throw;
      }
      // The database itself (broken, full, a failing disk, a conflict to run again): the whole
      // write fails.
      if (e.fault() != sql::Fault::other && e.fault() != sql::Fault::busy) throw;
      failed_ = "database '" + *name_ + "': " + e.what();
      if (e.fault() == sql::Fault::busy) throw Error(errc::busy, failed_);  // retried
      throw NonRetryableError(failed_);
    }
  }
  /// Why the body's SQL ended the step's transaction, if it did.
  const std::string& ended() const { return ended_; }
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
  std::string ended_;
};

}  // namespace

EntryWrite Commits::run_transaction(const EntryWrite& write) {
  TransactionStep& tx = *write.transaction;
  EntryWrite result;
  if (tx.ended) {  // it ended the transaction the last time: its attempt fails, unrun
    result = tx.failed(std::make_exception_ptr(NonRetryableError(*tx.ended)));
    result.transaction.reset();
    tx.written = result.entry;
    return result;
  }
  t_.db().execute("SAVEPOINT durable_step");
  std::exception_ptr error;
  std::string ended;
  try {
    ApplicationSql session(t_.db(), t_.name());
    try {
      result = tx.run(session);
    } catch (...) {
      ended = session.ended();
      if (ended.empty()) throw;
    }
    if (ended.empty()) ended = session.ended();  // the body caught it and went on
    if (!ended.empty()) {
      tx.ended = ended;
      throw sql::Failure(sql::Fault::retry, ended);  // the whole write is made again
    }
    if (!session.failed().empty()) throw NonRetryableError(session.failed());
    t_.db().execute("RELEASE SAVEPOINT durable_step");
  } catch (const sql::Failure&) {
    throw;  // the database failed, not the body: the whole transaction fails, or runs again
  } catch (const Halted&) {
    throw;  // the crash sweep's crash: nothing of the transaction is written
  } catch (...) {
    error = std::current_exception();
  }
  if (error) {
    t_.db().execute("ROLLBACK TO SAVEPOINT durable_step");
    t_.db().execute("RELEASE SAVEPOINT durable_step");
    result = tx.failed(error);
  }
  result.transaction.reset();
  tx.written = result.entry;
  return result;
}

}  // namespace durable::detail
