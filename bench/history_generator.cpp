// SPDX-License-Identifier: Apache-2.0
// How a big history is made (history_generator.hpp):
//
// 1. Seed: a Runtime executes `seed_runs` real runs on a file of their own (every kFailEvery-th
//    fails at its third step, which has no retries).
// 2. A fresh file made by a Runtime (so its schema, and its rows of workflows, are durable's)
//    gets the seed runs copied in, renumbered: run i of the seed (in the order they were created)
//    becomes run i of the file, created at T0 + i seconds, with a new id; every time of the run
//    and of its rows moves by the same amount, so that their durations stay what they were.
// 3. Doubling: while the file holds k < N runs, runs 1..m (m = min(k, N - k)) are copied as runs
//    k+1..k+m, each one k seconds later. So the file ends with run i created at T0 + i seconds
//    (T0 such that the last is created now), in rowid order, as a real history of a run a second
//    would be.
//
// A copy of a run is a row of runs and the rows of every table with a run_id column (steps,
// history, run_tags, step_progress, ... whatever the schema has when this runs), with only these
// columns changed: the run's id and every run_id (the new id), an INTEGER PRIMARY KEY (NULL, so
// the row gets a new one), and the times (INTEGER columns named `at`, `since` or `*_at`, moved).
// Everything else is copied as it is. The other columns naming runs (parent_id, forked_from,
// continued_as) are NULL in the seed's runs, so copying them as they are is right. A table with a
// run_id column that a trigger writes (INSERT, UPDATE or DELETE in a trigger's body) is left to its
// trigger: the copies of runs and steps fire it as durable's own INSERTs would.
//
// New ids have durable's form (12 hex digits of the creation time in ms, 16 more) with the run's
// position in the file as the last 16: unique, and in creation order.

#include "history_generator.hpp"

#include <SQLiteCpp/SQLiteCpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <durable/durable.hpp>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>

#include "bench_support.hpp"

namespace durable::bench::history {

namespace {

// Raised whenever the generator makes different files from the same schema, so that the files
// cached by an older generator are not reused.
constexpr int kGeneratorVersion = 1;
constexpr std::int64_t kSpacingMs = 1000;  // a run a second

struct Column {
  std::string name, type;
  int pk = 0;  // position in the primary key, from 1; 0: not in it
};

struct Table {
  std::string name;
  std::vector<Column> columns;
  bool without_rowid = false;
  bool has(std::string_view column) const {
    return std::any_of(columns.begin(), columns.end(),
                       [&](const Column& c) { return c.name == column; });
  }
};

std::string quoted(const std::string& name) { return "\"" + name + "\""; }

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

// ---- the seed -----------------------------------------------------------------------------------

durable::Workflow seed_workflow(const std::string& name) {
  durable::WorkflowOptions options;
  options.retry = durable::RetryPolicy{.max_attempts = 1};  // a failed step fails the run at once
  return durable::Workflow(
      name,
      [](durable::Step& step, const json& input) -> json {
        const int order = input.at("order").get<int>();
        const json item = step.run("load", [&] {
          return json{{"order", order}, {"sku", "sku-" + std::to_string(order % 97)}, {"qty", 2}};
        });
        const json priced = step.run("price", [&] {
          return json{{"order", order}, {"total", 42.5 + order % 13}, {"currency", "EUR"}};
        });
        return step.run("notify", [&] {
          if (input.value("fail", false)) throw std::runtime_error("the mail service refused it");
          return json{{"sent", true},
                      {"to", "customer-" + std::to_string(order % kCorrelations)},
                      {"item", item.at("sku")},
                      {"total", priced.at("total")}};
        });
      },
      options);
}

void add_workflows(durable::Runtime& runtime) {
  for (const std::string& name : workflow_names()) runtime.add(seed_workflow(name));
}

durable::RuntimeOptions options_for(const std::string& path) {
  durable::RuntimeOptions options;
  options.database = path;
  options.log_level = durable::LogLevel::off;
  return options;
}

// `runs` real runs on a fresh file at `path`.
void make_seed(const std::string& path, int runs) {
  durable::Runtime runtime(options_for(path));
  add_workflows(runtime);
  const auto& names = workflow_names();
  for (int i = 0; i < runs; ++i) {
    durable::StartOptions start;
    start.correlation_id = "customer-" + std::to_string(i % kCorrelations);
    if (i % 10 == 0) start.tags = {{"tenant", "acme"}};
    json input{{"order", i}};
    if (i % kFailEvery == kFailEvery - 1) input["fail"] = true;
    runtime.start(names[static_cast<std::size_t>(i) % names.size()], input, start);
  }
  runtime.run_until_idle();
  const durable::Counters counters = runtime.counters();
  const auto expected_failed = static_cast<std::uint64_t>(runs / kFailEvery);
  if (counters.runs_failed != expected_failed ||
      counters.runs_completed + counters.runs_failed != static_cast<std::uint64_t>(runs)) {
    throw std::runtime_error("the seed runs ended " + std::to_string(counters.runs_completed) +
                             " completed and " + std::to_string(counters.runs_failed) +
                             " failed, not " + std::to_string(runs - int(expected_failed)) +
                             " and " + std::to_string(expected_failed));
  }
}

// ---- the schema, as it is when this runs --------------------------------------------------------

Table read_table(SQLite::Database& db, const std::string& schema, const std::string& name) {
  Table table{name, {}, false};
  SQLite::Statement info(db, "PRAGMA " + schema + ".table_info(" + quoted(name) + ")");
  while (info.executeStep()) {
    table.columns.push_back({info.getColumn(1).getString(), upper(info.getColumn(2).getString()),
                             info.getColumn(5).getInt()});
  }
  SQLite::Statement sql(db, "SELECT sql FROM " + schema + ".sqlite_master WHERE name = ?");
  sql.bind(1, name);
  if (sql.executeStep()) {
    table.without_rowid =
        upper(sql.getColumn(0).getString()).find("WITHOUT ROWID") != std::string::npos;
  }
  return table;
}

// The tables that a trigger of the file writes to, lower-cased.
std::set<std::string> trigger_written(SQLite::Database& db) {
  static const std::regex target(
      R"((?:INSERT|REPLACE)\s+(?:OR\s+\w+\s+)?INTO\s+["`\[]?(\w+))"
      R"(|UPDATE\s+(?:OR\s+\w+\s+)?["`\[]?(\w+)["`\]]?\s+SET\b|DELETE\s+FROM\s+["`\[]?(\w+))",
      std::regex::icase);
  std::set<std::string> tables;
  SQLite::Statement triggers(db, "SELECT sql FROM main.sqlite_master WHERE type = 'trigger'");
  while (triggers.executeStep()) {
    const std::string sql = triggers.getColumn(0).getString();
    for (std::sregex_iterator it(sql.begin(), sql.end(), target), end; it != end; ++it) {
      for (std::size_t group = 1; group <= 3; ++group) {
        if ((*it)[group].matched) {
          std::string name = (*it)[group].str();
          std::transform(name.begin(), name.end(), name.begin(),
                         [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
          tables.insert(name);
        }
      }
    }
  }
  return tables;
}

// runs first, then every other table with a run_id column that no trigger writes; `left` gets
// the ones a trigger writes.
std::vector<Table> tables_to_clone(SQLite::Database& db, std::vector<std::string>& left) {
  const std::set<std::string> written = trigger_written(db);
  std::vector<Table> tables{read_table(db, "main", "runs")};
  if (!tables[0].has("id") || !tables[0].has("created_at")) {
    throw std::runtime_error("the runs table has no id or created_at column");
  }
  SQLite::Statement names(db,
                          "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name != "
                          "'runs' AND name NOT LIKE 'sqlite%' ORDER BY name");
  while (names.executeStep()) {
    Table table = read_table(db, "main", names.getColumn(0).getString());
    if (!table.has("run_id")) continue;
    std::string lower = table.name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (written.count(lower) != 0) {
      left.push_back(table.name);
    } else {
      tables.push_back(std::move(table));
    }
  }
  return tables;
}

bool is_time(const Column& c) {
  return c.type.find("INT") != std::string::npos &&
         (c.name == "at" || c.name == "since" || c.name.ends_with("_at"));
}

// The INSERT that copies the rows of `table` in schema `from` of the runs in temp.clone_map.
std::string copy_statement(const Table& table, const std::string& from) {
  const bool runs = table.name == "runs";
  const auto pk_columns = std::count_if(table.columns.begin(), table.columns.end(),
                                        [](const Column& c) { return c.pk > 0; });
  std::string columns, values;
  std::vector<const Column*> key(static_cast<std::size_t>(pk_columns));
  for (const Column& c : table.columns) {
    if (c.pk > 0) key[static_cast<std::size_t>(c.pk - 1)] = &c;
    const std::string column = "t." + quoted(c.name);
    std::string value = column;
    if ((runs && c.name == "id") || c.name == "run_id") {
      value = "m.new_id";
    } else if (c.pk == 1 && pk_columns == 1 && c.type == "INTEGER" && !table.without_rowid) {
      value = "NULL";  // an alias of the rowid: a fresh one
    } else if (is_time(c)) {
      value = column + " + m.shift";
    }
    columns += (columns.empty() ? "" : ", ") + quoted(c.name);
    values += (values.empty() ? "" : ", ") + value;
  }
  // In the clones' order, and each run's rows in their own order.
  std::string order = "m.rowid";
  if (!table.without_rowid) {
    order += ", t.rowid";
  } else {
    for (const Column* c : key) order += ", t." + quoted(c->name);
  }
  return "INSERT INTO main." + quoted(table.name) + " (" + columns + ") SELECT " + values +
         " FROM temp.clone_map m CROSS JOIN " + from + "." + quoted(table.name) + " t ON t." +
         (runs ? "id" : "run_id") + " = m.old_id ORDER BY " + order;
}

bool has_rows(SQLite::Database& db, const std::string& from, const Table& table) {
  SQLite::Statement any(db, "SELECT 1 FROM " + from + "." + quoted(table.name) + " LIMIT 1");
  return any.executeStep();
}

// Copies the runs that temp.clone_map names, with their rows, from schema `from`; one transaction
// with the statement that fills the map (`fill`, given its bindings).
template <class Bind>
void clone(SQLite::Database& db, const std::vector<Table>& tables, const std::string& from,
           const std::string& fill, Bind bind) {
  SQLite::Transaction tx(db, SQLite::TransactionBehavior::IMMEDIATE);
  db.exec("DELETE FROM temp.clone_map");
  SQLite::Statement map(db, fill);
  bind(map);
  map.exec();
  for (const Table& table : tables) {
    if (table.name == "runs" || has_rows(db, from, table)) db.exec(copy_statement(table, from));
  }
  tx.commit();
}

std::int64_t count_rows(SQLite::Database& db, const std::string& table) {
  return db.execAndGet("SELECT count(*) FROM main." + quoted(table)).getInt64();
}

// ---- the cache
// ------------------------------------------------------------------------------------

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

std::string file_name(std::int64_t runs, const std::string& fingerprint) {
  return "history-" + std::to_string(runs) + "-" + fingerprint + ".db";
}

void write_info(const HistoryFile& file) {
  std::ofstream out(file.path + ".info");
  out << "generation_s=" << file.generation_s << "\ngenerated_at=" << file.generated_at
      << "\ncloned=" << file.cloned_tables << "\ntriggers=" << file.trigger_tables << "\n";
  for (const auto& [table, n] : file.rows) out << "rows." << table << "=" << n << "\n";
}

// The facts of a cached file, from its .info; false when there is none.
bool read_info(HistoryFile& file) {
  std::ifstream in(file.path + ".info");
  if (!in) return false;
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "generation_s") file.generation_s = std::stod(value);
    if (key == "generated_at") file.generated_at = value;
    if (key == "cloned") file.cloned_tables = value;
    if (key == "triggers") file.trigger_tables = value;
    if (key.starts_with("rows.")) file.rows.emplace_back(key.substr(5), std::stoll(value));
  }
  return true;
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text.empty() ? "none" : text;
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Makes the file at `path` (which must not exist) of `runs` runs, from a seed of `seeds`.
// Doubles the runs of `db` from `from` up to `runs` (see the top of the file).
void double_up(SQLite::Database& db, const std::vector<Table>& tables, std::int64_t from,
               std::int64_t runs, bool verbose) {
  const auto started = Stopwatch::now();
  for (std::int64_t k = from; k < runs;) {
    const std::int64_t m = std::min(k, runs - k);
    clone(db, tables, "main",
          "INSERT INTO temp.clone_map (old_id, new_id, shift) SELECT id, printf('%012x%016x', "
          "created_at + ?1, rowid + ?2), ?1 FROM main.runs WHERE rowid <= ?3 ORDER BY rowid",
          [&](SQLite::Statement& s) {
            s.bind(1, k * kSpacingMs);
            s.bind(2, k);
            s.bind(3, m);
          });
    k += m;
    if (verbose) {
      std::fprintf(stderr, "history: %s of %s runs (%.1f s)\n", with_commas(double(k)).c_str(),
                   with_commas(double(runs)).c_str(), seconds_since(started));
    }
  }
}

// Counts the rows of the tables copied into `file`; throws unless runs 1..N are there.
void record_rows(SQLite::Database& db, const std::vector<Table>& tables, HistoryFile& file) {
  std::vector<std::string> names;
  for (const Table& table : tables) {
    names.push_back(table.name);
    file.rows.emplace_back(table.name, count_rows(db, table.name));
  }
  const std::int64_t max_rowid = db.execAndGet("SELECT max(rowid) FROM main.runs").getInt64();
  if (file.rows[0].second != file.runs || max_rowid != file.runs) {
    throw std::runtime_error("the generated file holds " + std::to_string(file.rows[0].second) +
                             " runs (last rowid " + std::to_string(max_rowid) + "), not " +
                             std::to_string(file.runs));
  }
  file.cloned_tables = joined(names);
}

// Makes the file at file.path (which must not exist) of file.runs runs, from a seed of `seeds`.
void generate(HistoryFile& file, int seeds, bool verbose) {
  const std::string seed_path = file.path + ".seed.db";
  Scratch::remove(seed_path);
  make_seed(seed_path, seeds);
  {
    durable::Runtime fresh(options_for(file.path));
    add_workflows(fresh);
  }
  SQLite::Database db(file.path, SQLite::OPEN_READWRITE);
  db.setBusyTimeout(10'000);
  // Only for the making: the file is checkpointed and closed before anyone reads it.
  db.exec("PRAGMA synchronous = OFF; PRAGMA cache_size = -1048576");
  db.exec("ATTACH DATABASE '" + seed_path + "' AS seed");
  db.exec(
      "CREATE TEMP TABLE clone_map (old_id TEXT NOT NULL, new_id TEXT NOT NULL, "
      "shift INTEGER NOT NULL)");
  std::vector<std::string> left;
  const std::vector<Table> tables = tables_to_clone(db, left);
  file.trigger_tables = joined(left);
  const std::int64_t t0 = now_ms() - (file.runs - 1) * kSpacingMs;
  clone(db, tables, "seed",
        "INSERT INTO temp.clone_map (old_id, new_id, shift) SELECT id, printf('%012x%016x', t, n), "
        "t - created_at FROM (SELECT id, created_at, n, ? + (n - 1) * ? AS t FROM (SELECT id, "
        "created_at, row_number() OVER (ORDER BY created_at, rowid) AS n FROM seed.runs)) "
        "ORDER BY n",
        [&](SQLite::Statement& s) {
          s.bind(1, t0);
          s.bind(2, kSpacingMs);
        });
  db.exec("DETACH DATABASE seed");
  Scratch::remove(seed_path);
  double_up(db, tables, seeds, file.runs, verbose);
  record_rows(db, tables, file);
  db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
}

}  // namespace

const std::vector<std::string>& workflow_names() {
  static const std::vector<std::string> names{"signup", "checkout", "invoice", "shipment",
                                              "report"};
  return names;
}

std::string schema_fingerprint(const GenerateOptions& options) {
  fs::create_directories(options.dir);
  const std::string probe = (options.dir / (".probe-" + std::to_string(getpid()) + ".db")).string();
  Scratch::remove(probe);
  {
    durable::Runtime runtime(options_for(probe));
    add_workflows(runtime);
  }
  std::string text = "generator " + std::to_string(kGeneratorVersion) + " seeds " +
                     std::to_string(options.seed_runs);
  {
    SQLite::Database db(probe, SQLite::OPEN_READONLY);
    SQLite::Statement schema(db,
                             "SELECT type, name, coalesce(sql, '') FROM sqlite_master "
                             "ORDER BY type, name");
    while (schema.executeStep()) {
      for (int i = 0; i < 3; ++i) {
        text += '\n';
        text += schema.getColumn(i).getString();
      }
    }
  }
  Scratch::remove(probe);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(text)));
  return hex;
}

HistoryFile history_file(std::int64_t runs, const GenerateOptions& options) {
  if (runs < 1) throw std::runtime_error("a history needs at least one run");
  const std::string fingerprint = schema_fingerprint(options);
  HistoryFile file;
  file.runs = runs;
  file.path = (options.dir / file_name(runs, fingerprint)).string();
  if (fs::exists(file.path) && read_info(file)) {
    file.cached = true;
    return file;
  }
  // Made under another name, so that an interrupted generation leaves no file to be reused.
  HistoryFile made = file;
  made.path = (options.dir / ("making-" + file_name(runs, fingerprint))).string();
  Scratch::remove(made.path);
  const auto start = Stopwatch::now();
  const int seeds = static_cast<int>(std::min<std::int64_t>(runs, options.seed_runs));
  generate(made, seeds, options.verbose);
  made.generation_s = seconds_since(start);
  made.generated_at = utc_now();
  Scratch::remove(file.path);
  fs::rename(made.path, file.path);
  Scratch::remove(made.path);
  made.path = file.path;
  write_info(made);
  return made;
}

std::vector<fs::path> stale_files(const GenerateOptions& options) {
  const std::string fingerprint = schema_fingerprint(options);
  std::vector<fs::path> stale;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(options.dir, ignored)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("history-") && name.ends_with(".db") &&
        name.find("-" + fingerprint + ".db") == std::string::npos) {
      stale.push_back(entry.path());
    }
  }
  return stale;
}

}  // namespace durable::bench::history
