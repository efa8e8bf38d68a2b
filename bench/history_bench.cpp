// SPDX-License-Identifier: Apache-2.0
// durable_history_bench: what a big history costs (issue 22). Reads that operators and programs
// make (the durable command, the HTTP API, Runtime::list), writes (W1, W3, a recovery) and the
// file's size, on files of N ended runs, each beside the raw SQLite figure measured in the same
// run on the same file.
//
//   durable_history_bench [--quick] [--sizes 1000,100000,1000000] [--reps N] [--dir DIR]
//                         [--cli PATH] [--generate]
//
// --generate makes (or finds) the files and measures nothing.
//
// The files (history_generator.hpp): N runs of 3 steps over 5 workflows, 2% failed, made from
// 500 real runs cloned in SQL, created a second apart up to now. They are cached in DIR (default:
// the build tree's bench/history-cache) under a name that carries N and a fingerprint of the
// schema, so a second run with the same sizes and schema reuses them (the output says so) and a
// changed schema makes new ones; the output names the files no run will use again. 1M runs took
// 23-35 s to make on a 2-core machine, and 1.1 GB; 10M (--sizes 10000000) work too, at about ten
// times that.
//
// Each figure is the median of --reps repetitions (5) after one warm-up, at each size:
// - the durable command (--cli, default the durable binary of this build), timed as a whole
//   process: `stats`, `runs --limit 100` (the newest 100), `runs --status failed --limit 100`;
//   beside `durable --version`, the cost of a process that opens no file;
// - `durable serve` on the file (a child process, port 0), one connection per request: GET
//   /metrics, /v1/stats, /v1/runs?limit=100 and, once the API has keyset pages (its answer has a
//   next_cursor), the second page; beside a GET no route matches (404), the server's floor;
// - in-process, on a copy of the file: opening a Runtime, Runtime::list (newest 100, and of one
//   workflow), Runtime::get;
// - writes on that copy (the cached file stays as made): W1 and W3 of workloads_bench.cpp
//   (bench_support.hpp) in steps/s, beside raw single-row INSERT + COMMIT; and the recovery of
//   10,000 pending runs, started by one Runtime and run to the end by a fresh one (time from its
//   constructor to all completed, and to the first step body begun), beside a raw read of them;
// - the file's size with its WAL, per run, and (where SQLite has the dbstat table) each table's
//   and index's bytes per run.
// The raw figures read the same file with SQLite alone: the naive counts a stats page grows with,
// the newest 100 rows by rowid, a keyset second page, a point lookup by id. A ratio is durable's
// time over raw's (for writes: durable's rate over raw's).
//
// --quick shrinks everything to a smoke run in a temporary directory (CTest runs it) whose
// figures are not meant to be quoted. Not a test otherwise: nothing is held to a limit here.

#include <SQLiteCpp/SQLiteCpp.h>

#include <atomic>
#include <cmath>
#include <durable/durable.hpp>
#include <map>
#include <optional>

#include "bench_support.hpp"
#include "child_process.hpp"
#include "history_generator.hpp"

#ifndef DURABLE_CLI_PATH
#define DURABLE_CLI_PATH "durable"
#endif
#ifndef DURABLE_HISTORY_CACHE
#define DURABLE_HISTORY_CACHE ""
#endif

namespace {

using namespace durable::bench;
using namespace durable::bench::workloads;
namespace history = durable::bench::history;

struct Settings {
  std::vector<std::int64_t> sizes{1'000, 100'000, 1'000'000};
  int reps = 5;
  int write_reps = 5;
  int w1_runs = kW1Runs, w3_runs = kW3Runs;
  int recovery_runs = 10'000, recovery_reps = 3;
  int seeds = 500;
  std::string dir = DURABLE_HISTORY_CACHE, cli = DURABLE_CLI_PATH;
  bool quick = false;
  bool generate_only = false;  // make or find the files, and measure nothing
};

// ---- the table ----------------------------------------------------------------------------------

enum class Unit { ms, steps_per_s };

// A row of the table: durable's figure and the raw one at each size (NaN: not measured).
struct Line {
  std::string what, raw;
  Unit unit = Unit::ms;
  std::map<std::int64_t, std::pair<double, double>> at;  // size -> (durable, raw)
  std::string note;                                      // in place of figures, when there are none
};

class Report {
 public:
  Line& line(const std::string& what, const std::string& raw, Unit unit = Unit::ms) {
    for (Line& l : lines_) {
      if (l.what == what) return l;
    }
    lines_.push_back(Line{what, raw, unit, {}, {}});
    return lines_.back();
  }
  void set(const std::string& what, const std::string& raw, std::int64_t size, double value,
           double raw_value, Unit unit = Unit::ms) {
    line(what, raw, unit).at[size] = {value, raw_value};
  }
  const std::vector<Line>& lines() const { return lines_; }

 private:
  std::vector<Line> lines_;
};

std::string figure(double value, Unit unit) {
  if (std::isnan(value)) return "-";
  if (unit == Unit::steps_per_s) return with_commas(value) + " steps/s";
  if (value >= 1000) return fixed(value / 1000, "s", 2);
  return fixed(value, "ms", value >= 100 ? 0 : value >= 10 ? 1 : value >= 1 ? 2 : 3);
}

std::string ratio_text(double value, double raw) {
  if (std::isnan(value) || std::isnan(raw) || raw <= 0) return "";
  char text[32];
  const double r = value / raw;
  std::snprintf(text, sizeof text, r >= 100 ? " (%.0fx)" : r >= 10 ? " (%.1fx)" : " (%.2fx)", r);
  return text;
}

void print_markdown(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  auto cells = [](const std::string& text) {  // a UTF-8 sequence is one cell wide
    return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
      return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    }));
  };
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], cells(row[i]));
  }
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::string text = "|";
    for (std::size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < rows[r].size() ? rows[r][i] : "";
      text += " " + cell + std::string(width[i] - cells(cell), ' ') + " |";
    }
    std::printf("%s\n", text.c_str());
    if (r == 0) {
      text = "|";
      for (const std::size_t w : width) text += std::string(w + 2, '-') + "|";
      std::printf("%s\n", text.c_str());
    }
  }
}

std::string size_name(std::int64_t runs) { return with_commas(double(runs)) + " runs"; }

void print_report(const Report& report, const Settings& settings) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> head{"median of " + std::to_string(settings.reps) + " (x raw)"};
  for (const std::int64_t n : settings.sizes) head.push_back(size_name(n));
  head.push_back("raw SQLite beside it, at each size");
  rows.push_back(head);
  for (const Line& line : report.lines()) {
    std::vector<std::string> row{line.what};
    std::string raws;
    for (const std::int64_t n : settings.sizes) {
      const auto it = line.at.find(n);
      if (it == line.at.end()) {
        row.push_back(line.note.empty() ? "-" : line.note);
        continue;
      }
      const auto [value, raw] = it->second;
      row.push_back(figure(value, line.unit) + ratio_text(value, raw));
      if (!std::isnan(raw)) {
        raws += (raws.empty() ? "" : " · ") +
                (line.unit == Unit::steps_per_s ? with_commas(raw) + "/s" : figure(raw, line.unit));
      }
    }
    row.push_back(line.raw.empty() ? "" : line.raw + (raws.empty() ? "" : ": " + raws));
    rows.push_back(row);
  }
  print_markdown(rows);
}

// ---- timing -------------------------------------------------------------------------------------

// The median of `reps` runs of `body` after one warm-up, in ms.
template <class F>
double median_ms(int reps, F&& body) {
  body();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto start = Stopwatch::now();
    body();
    ms.push_back(seconds_since(start) * 1e3);
  }
  return median(ms);
}

// Reads every column of every row as text, as a reader that returns them would; the rows read.
std::size_t read_all(SQLite::Statement& query) {
  std::size_t rows = 0;
  std::string text;
  while (query.executeStep()) {
    ++rows;
    for (int i = 0; i < query.getColumnCount(); ++i) text = query.getColumn(i).getString();
  }
  query.reset();
  return rows;
}

// The raw reads, on one connection to the file: the naive SQL for the same answers.
struct Raw {
  explicit Raw(const std::string& path)
      : db(path, SQLite::OPEN_READONLY),
        by_status(db, "SELECT status, count(*) FROM runs GROUP BY status"),
        by_workflow(db, "SELECT workflow, status, count(*) FROM runs GROUP BY workflow, status"),
        step_totals(db,
                    "SELECT count(*), sum(attempts), sum(duration_ms) FROM steps "
                    "WHERE kind = 'run'"),
        steps_by_workflow(db,
                          "SELECT r.workflow, s.base, count(*), sum(s.duration_ms) FROM steps s "
                          "JOIN runs r ON r.id = s.run_id WHERE s.kind = 'run' "
                          "GROUP BY r.workflow, s.base"),
        newest(db, "SELECT * FROM runs ORDER BY rowid DESC LIMIT 100"),
        failed(db, "SELECT * FROM runs WHERE status = 'failed' ORDER BY rowid DESC LIMIT 100"),
        of_workflow(db, "SELECT * FROM runs WHERE workflow = ? ORDER BY rowid DESC LIMIT 100"),
        page_two(db, "SELECT * FROM runs WHERE rowid < ? ORDER BY rowid DESC LIMIT 100"),
        by_id(db, "SELECT * FROM runs WHERE id = ?") {}
  // The median ms of the queries run one after another.
  double time(std::initializer_list<SQLite::Statement*> queries, int reps) {
    return median_ms(reps, [&] {
      for (SQLite::Statement* query : queries) read_all(*query);
    });
  }
  SQLite::Database db;
  SQLite::Statement by_status, by_workflow, step_totals, steps_by_workflow;
  SQLite::Statement newest, failed, of_workflow, page_two, by_id;
};

// What the raw figures beside durable's are.
const char* const kRawNewest = "SELECT * FROM runs ORDER BY rowid DESC LIMIT 100";
const char* const kRawNewestCounts = "the newest 100 by rowid, + runs counted by status";
const char* const kRawFailedCounts = "… WHERE status = 'failed' …, + runs counted by status";
const char* const kRawStats = "runs counted by status, + steps summed";
const char* const kRawMetrics = "runs counted by workflow and status, + steps summed by both";
const char* const kRawWorkflow = "… WHERE workflow = ? ORDER BY rowid DESC LIMIT 100";
const char* const kRawPoint = "SELECT * FROM runs WHERE id = ?";
const char* const kRawPageTwo = "… WHERE rowid < ? ORDER BY rowid DESC LIMIT 100";

// ---- reads --------------------------------------------------------------------------------------

std::string url_encoded(const std::string& text) {
  std::string out;
  for (const unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

void cli_reads(Report& report, Raw& raw, const Settings& s, const history::HistoryFile& file,
               const std::string& err) {
  const std::int64_t n = file.runs;
  auto process = [&](std::vector<std::string> args) {
    args.insert(args.begin(), s.cli);
    return median_ms(s.reps, [&] { run_process(args, err); });
  };
  report.set("`durable --version` (a process, no file)", "", n, process({"--version"}), NAN);
  report.set("`durable stats`", kRawStats, n, process({"--db", file.path, "stats"}),
             raw.time({&raw.by_status, &raw.step_totals}, s.reps));
  report.set("`durable runs --limit 100`", kRawNewestCounts, n,
             process({"--db", file.path, "runs", "--limit", "100"}),
             raw.time({&raw.newest, &raw.by_status}, s.reps));
  report.set("`durable runs --status failed --limit 100`", kRawFailedCounts, n,
             process({"--db", file.path, "runs", "--status", "failed", "--limit", "100"}),
             raw.time({&raw.failed, &raw.by_status}, s.reps));
}

void http_reads(Report& report, Raw& raw, const Settings& s, const history::HistoryFile& file,
                const std::string& err) {
  const std::int64_t n = file.runs;
  ServeChild serve(s.cli, file.path, err);
  auto get = [&](const std::string& target, int expected) {
    return median_ms(s.reps, [&] {
      const HttpAnswer answer = http_get(serve.port(), target);
      if (answer.status != expected) {
        throw std::runtime_error("GET " + target + " answered " + std::to_string(answer.status) +
                                 ": " + answer.body.substr(0, 300));
      }
    });
  };
  report.set("GET /v1/unrouted (404, the server's floor)", "", n, get("/v1/unrouted", 404), NAN);
  report.set("GET /metrics", kRawMetrics, n, get("/metrics", 200),
             raw.time({&raw.by_workflow, &raw.steps_by_workflow}, s.reps));
  report.set("GET /v1/stats", kRawStats, n, get("/v1/stats", 200),
             raw.time({&raw.by_status, &raw.step_totals}, s.reps));
  report.set("GET /v1/runs?limit=100", kRawNewestCounts, n, get("/v1/runs?limit=100", 200),
             raw.time({&raw.newest, &raw.by_status}, s.reps));
  // The second page by keyset cursor (issue 22): measured once the answer carries next_cursor.
  const json first = json::parse(http_get(serve.port(), "/v1/runs?limit=100").body);
  const std::string cursor =
      first.is_object() && first.contains("next_cursor") && first["next_cursor"].is_string()
          ? first["next_cursor"].get<std::string>()
          : "";
  const std::string what = "GET /v1/runs?limit=100&cursor=C (the second page)";
  if (cursor.empty()) {
    report.line(what, kRawPageTwo).note = "no next_cursor";
  } else {
    report.set(what, kRawPageTwo, n, get("/v1/runs?limit=100&cursor=" + url_encoded(cursor), 200),
               raw.time({&raw.page_two}, s.reps));
  }
}

durable::RuntimeOptions options_for(const std::string& path) {
  durable::RuntimeOptions options;
  options.database = path;
  options.log_level = durable::LogLevel::off;
  options.poll_interval = std::chrono::milliseconds(5);
  return options;
}

// Runtime::list and get on `work` (a copy of the file).
void runtime_reads(Report& report, Raw& raw, const Settings& s, std::int64_t n,
                   const std::string& work, const std::string& point_id) {
  report.set("open a Runtime on the file", "open + read the schema", n,
             median_ms(s.reps, [&] { durable::Runtime runtime(options_for(work)); }),
             median_ms(s.reps, [&] {
               SQLite::Database db(work, SQLite::OPEN_READONLY);
               db.execAndGet("SELECT count(*) FROM sqlite_master");
             }));
  durable::Runtime runtime(options_for(work));
  const std::string workflow = history::workflow_names()[1];
  // A page must be full, but a workflow's when it has fewer runs than that.
  auto list = [&](const durable::RunFilter& filter) {
    return median_ms(s.reps, [&] {
      const std::size_t found = runtime.list(filter).size();
      if (found == 0 || (filter.workflow.empty() &&
                         found != static_cast<std::size_t>(std::min<std::int64_t>(100, n)))) {
        throw std::runtime_error("Runtime::list found " + std::to_string(found) + " runs");
      }
    });
  };
  report.set("Runtime::list newest 100", kRawNewest, n, list({.limit = 100}),
             raw.time({&raw.newest}, s.reps));
  raw.of_workflow.bind(1, workflow);
  report.set("Runtime::list of one workflow, newest 100", kRawWorkflow, n,
             list({.workflow = workflow, .limit = 100}), raw.time({&raw.of_workflow}, s.reps));
  // The second page: the runs after the first page's last, by its cursor.
  const std::vector<durable::RunInfo> first = runtime.list({.limit = 100});
  if (n > 100 && first.size() == 100) {
    report.set("Runtime::list second page (RunFilter::cursor)", kRawPageTwo, n,
               list({.limit = 100, .cursor = first.back().cursor}),
               raw.time({&raw.page_two}, s.reps));
  } else {
    report.line("Runtime::list second page (RunFilter::cursor)", kRawPageTwo).note = "one page";
  }
  raw.by_id.bind(1, point_id);
  report.set("Runtime::get one run", kRawPoint, n,
             median_ms(s.reps,
                       [&] {
                         if (runtime.get(point_id).id != point_id)
                           throw std::runtime_error("get() failed");
                       }),
             raw.time({&raw.by_id}, s.reps));
}

// ---- writes -------------------------------------------------------------------------------------

// Steps per second of W1 or W3 (all at once) on `work`, in a fresh Runtime.
double workload_rate(const std::string& work, bool w3, const Settings& s) {
  durable::Runtime runtime(options_for(work));
  runtime.add(loop_workflow());
  runtime.add(fanout_workflow());
  const int runs = w3 ? s.w3_runs : s.w1_runs;
  const auto start = Stopwatch::now();
  if (w3) {
    start_at_once(runtime, runs, "fanout", json::object());
  } else {
    start_at_once(runtime, runs, "loop", json{{"steps", kW1Steps}});
  }
  runtime.run_until_idle();
  const double elapsed = seconds_since(start);
  if (runtime.counters().runs_completed != static_cast<std::uint64_t>(runs)) {
    throw std::runtime_error(std::string(w3 ? "W3" : "W1") + ": " +
                             std::to_string(runtime.counters().runs_completed) + " of " +
                             std::to_string(runs) + " runs completed");
  }
  return runs * (w3 ? kParallel + 1 : kW1Steps) / elapsed;
}

void workload_writes(Report& report, Scratch& scratch, const Settings& s, std::int64_t n,
                     const std::string& work) {
  // Raw and durable back to back in each repetition, so that a slow phase of the machine meets
  // both alike.
  std::vector<double> raw, w1, w3;
  for (int rep = 0; rep < s.write_reps; ++rep) {
    raw.push_back(raw_insert_rate(scratch, Durability::normal, s.w1_runs * kW1Steps));
    w1.push_back(workload_rate(work, false, s));
    w3.push_back(workload_rate(work, true, s));
  }
  const std::string rawname = "INSERT + COMMIT, one row each, a fresh WAL file";
  report.set("W1: " + std::to_string(s.w1_runs) + " runs x " + std::to_string(kW1Steps) +
                 " steps, all at once",
             rawname, n, median(w1), median(raw), Unit::steps_per_s);
  report.set("W3: " + std::to_string(s.w3_runs) + " runs x (" + std::to_string(kParallel) +
                 " parallel + 1), all at once",
             rawname, n, median(w3), median(raw), Unit::steps_per_s);
}

durable::Workflow recover_workflow(std::atomic<double>* first_s, Stopwatch::time_point* start) {
  return durable::Workflow("recover", [first_s, start](durable::Step& step, const json&) -> json {
    const int a = step.run("first", [&] {
      double none = 0;
      if (first_s != nullptr) first_s->compare_exchange_strong(none, seconds_since(*start));
      return 1;
    });
    return step.run("second", [a] { return a + 1; });
  });
}

void recovery(Report& report, const Settings& s, std::int64_t n, const std::string& work) {
  std::vector<double> all, first, raw;
  for (int rep = 0; rep < s.recovery_reps; ++rep) {
    {
      durable::Runtime starter(options_for(work));
      starter.add(recover_workflow(nullptr, nullptr));
      start_at_once(starter, s.recovery_runs, "recover", json::object());
    }
    const auto raw_start = Stopwatch::now();
    {
      SQLite::Database db(work, SQLite::OPEN_READONLY);
      SQLite::Statement pending(db,
                                "SELECT id, workflow, correlation_id, status, input, due_at, owner "
                                "FROM runs WHERE status = 'pending'");
      if (read_all(pending) != static_cast<std::size_t>(s.recovery_runs)) {
        throw std::runtime_error("the file does not hold the runs to recover");
      }
    }
    raw.push_back(seconds_since(raw_start) * 1e3);
    std::atomic<double> first_s{0};
    Stopwatch::time_point start = Stopwatch::now();
    durable::Runtime runtime(options_for(work));
    runtime.add(recover_workflow(&first_s, &start));
    runtime.run_until_idle();
    all.push_back(seconds_since(start) * 1e3);
    first.push_back(first_s * 1e3);
    if (runtime.counters().runs_completed != static_cast<std::uint64_t>(s.recovery_runs)) {
      throw std::runtime_error("the recovery completed " +
                               std::to_string(runtime.counters().runs_completed) + " runs");
    }
  }
  const std::string what = "recover " + with_commas(s.recovery_runs) + " pending runs";
  const std::string rawname = "read the pending rows (WHERE status = 'pending')";
  report.set(what + ": to all completed", rawname, n, median(all), median(raw));
  report.set(what + ": to the first step begun", "", n, median(first), NAN);
}

// ---- sizes
// ----------------------------------------------------------------------------------------

// Bytes of each b-tree ("table", "  index (columns)"), from dbstat; empty without dbstat.
std::vector<std::pair<std::string, double>> btree_bytes(SQLite::Database& db) {
  try {
    db.exec("SELECT 1 FROM dbstat LIMIT 1");
  } catch (const SQLite::Exception&) {
    return {};
  }
  std::map<std::string, double> bytes;
  SQLite::Statement pages(db, "SELECT name, sum(pgsize) FROM dbstat GROUP BY name");
  while (pages.executeStep())
    bytes[pages.getColumn(0).getString()] = pages.getColumn(1).getDouble();
  std::vector<std::pair<std::string, double>> out;
  SQLite::Statement tables(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
  while (tables.executeStep()) {
    const std::string table = tables.getColumn(0).getString();
    if (!bytes.count(table)) continue;
    out.emplace_back(table, bytes[table]);
    SQLite::Statement indexes(db,
                              "SELECT name FROM sqlite_master WHERE type = 'index' AND "
                              "tbl_name = ? ORDER BY name");
    indexes.bind(1, table);
    while (indexes.executeStep()) {
      const std::string index = indexes.getColumn(0).getString();
      std::string columns;
      SQLite::Statement info(db, "PRAGMA index_info(\"" + index + "\")");
      while (info.executeStep()) {
        columns += (columns.empty() ? "" : ", ") + info.getColumn(2).getString();
      }
      out.emplace_back("  " + index + " (" + columns + ")", bytes[index]);
    }
  }
  return out;
}

// ---- main ---------------------------------------------------------------------------------------

std::vector<std::int64_t> parse_sizes(const std::string& text) {
  std::vector<std::int64_t> sizes;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    std::size_t used = 0;
    const long long value = item.empty() ? 0 : std::stoll(item, &used);
    if (used != item.size() || value < 1) throw std::invalid_argument(item);
    sizes.push_back(value);
    at = comma + 1;
  }
  return sizes;
}

}  // namespace

namespace {

// What one size's file is: its making, its bytes, its b-trees' bytes.
struct FileFacts {
  history::HistoryFile file;
  std::uintmax_t bytes = 0;
  std::vector<std::pair<std::string, double>> btrees;
};

void print_files(const std::vector<FileFacts>& facts) {
  for (const FileFacts& f : facts) {
    std::string rows;
    for (const auto& [table, count] : f.file.rows) {
      rows += (rows.empty() ? "" : ", ") + table + " " + with_commas(double(count));
    }
    std::printf("- %s: %s in %.1f s (%s); rows: %s; tables kept by triggers: %s\n",
                size_name(f.file.runs).c_str(), f.file.cached ? "cached, generated" : "generated",
                f.file.generation_s, f.file.generated_at.c_str(), rows.c_str(),
                f.file.trigger_tables.c_str());
  }
}

// Rows: the file, then each b-tree; columns: the sizes; cells: bytes per run.
void print_sizes(const std::vector<FileFacts>& facts) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> head{"bytes per run"};
  for (const FileFacts& f : facts) head.push_back(size_name(f.file.runs));
  rows.push_back(head);
  std::vector<std::string> total{"file + WAL"};
  for (const FileFacts& f : facts) {
    total.push_back(with_commas(double(f.bytes) / double(f.file.runs)) + " (" +
                    fixed(double(f.bytes) / 1e6, "MB") + ")");
  }
  rows.push_back(total);
  if (facts.empty() || facts.back().btrees.empty()) {
    print_markdown(rows);
    std::printf("(no dbstat table in this SQLite: no bytes per table and index)\n");
    return;
  }
  // The b-trees of more than one page in the largest file; the others in one line.
  const FileFacts& largest = facts.back();
  std::vector<std::string> shown;
  for (const auto& [name, bytes] : largest.btrees) {
    if (bytes > 4096) shown.push_back(name);
  }
  auto bytes_of = [](const FileFacts& f, const std::string& name) {
    for (const auto& [n, b] : f.btrees) {
      if (n == name) return b;
    }
    return 0.0;
  };
  for (const std::string& name : shown) {
    std::vector<std::string> row{name};
    for (const FileFacts& f : facts) {
      row.push_back(with_commas(bytes_of(f, name) / double(f.file.runs)));
    }
    rows.push_back(row);
  }
  std::vector<std::string> rest{"the other b-trees (one page each)"};
  for (const FileFacts& f : facts) {
    double bytes = 0;
    for (const auto& [name, b] : f.btrees) {
      if (std::find(shown.begin(), shown.end(), name) == shown.end()) bytes += b;
    }
    rest.push_back(with_commas(bytes / double(f.file.runs)));
  }
  rows.push_back(rest);
  print_markdown(rows);
}

// Every measurement of one size.
FileFacts measure_size(std::int64_t n, Report& report, Scratch& scratch, const Settings& s,
                       const history::GenerateOptions& gen) {
  FileFacts facts{history::history_file(n, gen), 0, {}};
  const history::HistoryFile& file = facts.file;
  std::fprintf(stderr, "history: %s: %s (%.1f s): %s\n", size_name(n).c_str(),
               file.cached ? "cached" : "generated", file.generation_s, file.path.c_str());
  facts.bytes = file_bytes(file.path);
  const std::string err = (scratch.dir() / "child-stderr.txt").string();
  std::string point_id;
  Raw raw(file.path);
  facts.btrees = btree_bytes(raw.db);
  {
    SQLite::Statement id(raw.db, "SELECT id FROM runs WHERE rowid = ?");
    id.bind(1, static_cast<std::int64_t>((n + 1) / 2));
    if (!id.executeStep()) throw std::runtime_error("no run at the middle rowid");
    point_id = id.getColumn(0).getString();
  }
  raw.page_two.bind(1, static_cast<std::int64_t>(n - 99));
  std::fprintf(stderr, "history: %s: the durable command\n", size_name(n).c_str());
  cli_reads(report, raw, s, file, err);
  std::fprintf(stderr, "history: %s: durable serve\n", size_name(n).c_str());
  http_reads(report, raw, s, file, err);
  // The rest writes, or may: on a copy.
  const std::string work = scratch.fresh("work");
  fs::copy_file(file.path, work);
  std::fprintf(stderr, "history: %s: Runtime::list, W1, W3, recovery\n", size_name(n).c_str());
  runtime_reads(report, raw, s, n, work, point_id);
  workload_writes(report, scratch, s, n, work);
  recovery(report, s, n, work);
  Scratch::remove(work);
  fs::remove(err);
  return facts;
}

int usage() {
  std::fprintf(stderr,
               "usage: durable_history_bench [--quick] [--sizes N,N,...] [--reps N] [--dir DIR] "
               "[--cli PATH] [--generate]\n");
  return 2;
}

// The settings of the command line; nothing when it is not understood.
std::optional<Settings> parse_args(int argc, char** argv) {
  Settings s;
  bool dir_given = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      const bool has_value = i + 1 < argc;
      if (arg == "--quick") {
        s.quick = true;
      } else if (arg == "--sizes" && has_value) {
        s.sizes = parse_sizes(argv[++i]);
      } else if (arg == "--reps" && has_value) {
        s.reps = s.write_reps = std::stoi(argv[++i]);
      } else if (arg == "--dir" && has_value) {
        s.dir = argv[++i];
        dir_given = true;
      } else if (arg == "--generate") {
        s.generate_only = true;
      } else if (arg == "--cli" && has_value) {
        s.cli = argv[++i];
      } else {
        return std::nullopt;
      }
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (s.quick) {
    s.sizes = {100, 400};
    s.reps = s.write_reps = s.recovery_reps = 1;
    s.w1_runs = 10;
    s.w3_runs = 5;
    s.recovery_runs = 100;
    s.seeds = 50;
    if (!dir_given) s.dir.clear();  // a temporary directory, removed at the end
  }
  if (s.reps < 1) return std::nullopt;
  return s;
}

void run(const Settings& s) {
  Scratch scratch(s.dir, "durable-history");
  const history::GenerateOptions gen{scratch.dir(), s.seeds, true};
  std::printf(
      "durable_history_bench %s, %s, in %s (%s), SQLite %s; each figure the median of %d after "
      "one warm-up (writes: of %d; recovery: of %d)\n",
      std::string(durable::version()).c_str(), utc_now().c_str(), scratch.dir().c_str(),
      file_system_of(scratch.dir()).c_str(), SQLite::getLibVersion(), s.reps, s.write_reps,
      s.recovery_reps);
  for (const fs::path& stale : history::stale_files(gen)) {
    std::printf("note: %s was made for another schema and will not be used again\n", stale.c_str());
  }
  if (s.generate_only) {
    for (const std::int64_t n : s.sizes) {
      const history::HistoryFile file = history::history_file(n, gen);
      std::printf("%s: %s in %.1f s: %s\n", size_name(n).c_str(),
                  file.cached ? "cached, generated" : "generated", file.generation_s,
                  file.path.c_str());
    }
    return;
  }
  Report report;
  std::vector<FileFacts> facts;
  for (const std::int64_t n : s.sizes) facts.push_back(measure_size(n, report, scratch, s, gen));
  std::printf("\nHistories (%s):\n",
              s.quick ? "a quick run: not figures to quote" : "\"cached\": made by an earlier run");
  print_files(facts);
  std::printf("\n");
  print_report(report, s);
  std::printf("\n");
  print_sizes(facts);
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Settings> settings = parse_args(argc, argv);
  if (!settings) return usage();
  try {
    run(*settings);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "durable_history_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
