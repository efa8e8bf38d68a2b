// SPDX-License-Identifier: Apache-2.0
// Money moved exactly once. Two transfers between two accounts, written two ways, each put
// through testing::crash_sweep: a crash at every step boundary (after a body ran and before its
// result was journaled, and just after), then a restart that drives the run to its end.
//
// - "ledger" keeps the accounts in durable's own database and moves the money in
//   step.transaction: the UPDATEs commit in the transaction that journals the step, so after
//   any crash the balances are those of the crash-free run, and their sum never changes.
// - "ledger-by-run" keeps them in a database of its own (one file per run, through a separate
//   connection) and moves the money in step.run: a crash after a body's UPDATE and before its
//   journal entry runs the body again, and the money moves twice.
//
// The program prints both sweeps and exits 0 when the first has every case right and the
// second shows the double application; 1 otherwise.
//
//   ledger [--verbose]    --verbose prints every case of both sweeps

#include <SQLiteCpp/SQLiteCpp.h>

#include <cstring>
#include <durable/durable.hpp>
#include <durable/testing.hpp>
#include <filesystem>
#include <iostream>
#include <string>

namespace {

using durable::json;
using durable::Sql;
using durable::Step;

constexpr int kOpening = 100;  // each account's opening balance

// The balances, as {"alice": n, "bob": n}.
json balances_of(const json& rows) {
  json out = json::object();
  for (const json& row : rows) out[row.at("id").get<std::string>()] = row.at("balance");
  return out;
}

durable::Workflow ledger() {
  return durable::Workflow("ledger", [](Step& step, const json&) -> json {
    step.transaction("open", [](Sql& sql) {
      sql.exec("CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, balance INTEGER)");
      sql.exec("INSERT INTO accounts (id, balance) VALUES ('alice', $1), ('bob', $1)", kOpening);
    });
    const auto move = [&](const char* id, const char* from, const char* to, int amount) {
      step.transaction(id, [&](Sql& sql) {
        sql.exec("UPDATE accounts SET balance = balance - $1 WHERE id = $2", amount, from);
        sql.exec("UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, to);
      });
    };
    move("rent", "alice", "bob", 30);
    move("refund", "bob", "alice", 20);
    return balances_of(step.transaction(
        "balances", [](Sql& sql) { return sql.query("SELECT id, balance FROM accounts"); }));
  });
}

// The same money in a database of its own: a file per run next to the temporary directory.
durable::Workflow ledger_by_run() {
  return durable::Workflow("ledger-by-run", [](Step& step, const json&) -> json {
    const std::string file = (std::filesystem::temp_directory_path() /
                              ("ledger-" + std::string(step.run_id()) + ".db"))
                                 .string();
    step.run("open", [&] {
      SQLite::Database db(file, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
      db.exec("CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, balance INTEGER)");
      db.exec("INSERT OR IGNORE INTO accounts VALUES ('alice', 100), ('bob', 100)");
    });
    const auto move = [&](const char* id, const char* from, const char* to, int amount) {
      step.run(id, [&] {
        SQLite::Database db(file, SQLite::OPEN_READWRITE);
        SQLite::Statement out(db, "UPDATE accounts SET balance = balance - ? WHERE id = ?");
        out.bind(1, amount);
        out.bind(2, from);
        out.exec();
        SQLite::Statement in(db, "UPDATE accounts SET balance = balance + ? WHERE id = ?");
        in.bind(1, amount);
        in.bind(2, to);
        in.exec();
      });
    };
    move("rent", "alice", "bob", 30);
    move("refund", "bob", "alice", 20);
    const json balances = step.run("balances", [&] {
      SQLite::Database db(file, SQLite::OPEN_READONLY);
      SQLite::Statement query(db, "SELECT id, balance FROM accounts");
      json rows = json::array();
      while (query.executeStep()) {
        rows.push_back({{"id", query.getColumn(0).getString()},
                        {"balance", query.getColumn(1).getInt()}});
      }
      return balances_of(rows);
    });
    std::filesystem::remove(file);
    return balances;
  });
}

struct Tally {
  int cases = 0, right = 0, total_kept = 0;
};

Tally tally(const durable::testing::CrashSweep& sweep) {
  Tally t;
  for (const auto& c : sweep.cases) {
    ++t.cases;
    t.right += c.matches ? 1 : 0;
    // The money in the accounts after the restart, wherever the crash struck.
    if (c.output.is_object() &&
        c.output.value("alice", 0) + c.output.value("bob", 0) == 2 * kOpening) {
      ++t.total_kept;
    }
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const bool verbose = argc > 1 && std::strcmp(argv[1], "--verbose") == 0;
  try {
    const durable::testing::CrashSweep exact = durable::testing::crash_sweep(ledger());
    const durable::testing::CrashSweep twice = durable::testing::crash_sweep(ledger_by_run());
    const Tally a = tally(exact), b = tally(twice);
    std::cout << "step.transaction: crash-free balances " << exact.expected.info.output.dump()
              << "; " << a.right << " of " << a.cases
              << " crash points end with them; " << a.total_kept << " of " << a.cases
              << " keep the total of " << 2 * kOpening << "\n";
    std::cout << "step.run and a separate connection: crash-free balances "
              << twice.expected.info.output.dump() << "; " << b.right << " of " << b.cases
              << " crash points end with them\n";
    for (const auto& c : twice.cases) {
      if (!c.matches) {
        std::cout << "  crash " << (c.before_commit ? "before" : "after") << " the commit of '"
                  << c.step << "': " << c.output.dump() << " (the transfer applied twice)\n";
      }
    }
    if (verbose) std::cout << exact.report() << "\n" << twice.report() << "\n";
    const bool ok = exact.ok() && a.total_kept == a.cases && !twice.ok();
    std::cout << (ok ? "ok: step.transaction applied each transfer exactly once\n"
                     : "WRONG: see above\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "ledger: " << e.what() << "\n";
    return 1;
  }
}
