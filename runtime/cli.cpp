// SPDX-License-Identifier: Apache-2.0
// The durable command: what operators ask of a database file, answered in seconds.
//
//   durable [--db FILE] [--json] COMMAND [ARGS]
//
// Exit codes a script can rely on: 0 done; 1 failed (the database could not be read or
// written); 2 bad usage (unknown command or flag, malformed JSON, no database at the path);
// 3 no such run or schedule; 4 the run's state refuses it (retry of a run that is not failed).
//
// The command line is checked in full (command, subcommand, flags, arguments and their values)
// before the database is looked for, so that a mistyped command is named as such in any folder.
//
// Commands that only read (runs, show, steps, stats, schedules, metrics) open the file
// read-only: they work on a file this user may not write, and never migrate or create one.

#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <durable/version.hpp>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "admin.hpp"
#include "api.hpp"
#include "durations.hpp"
#include "errors_internal.hpp"
#include "http_checks.hpp"
#include "http_server.hpp"
#include "store.hpp"

using durable::json;
namespace ops = durable::ops;
using durable::detail::edit_distance;

namespace {

enum Exit { kOk = 0, kFailed = 1, kUsage = 2, kNotFound = 3, kConflict = 4 };

constexpr const char* kUsageText = R"(usage: durable [--db DATABASE] [--json] COMMAND [ARGS]

  runs [--status S] [--workflow W] [--correlation C] [--limit N]
                                                 runs, newest first, with counts by status
  show RUN                                       a run: history, step timeline, runbook if failed
  steps RUN                                      a run's journal
  retry RUN                                      run a failed run again (completed steps stay done)
  cancel RUN [--reason R]                        cancel a run that has not ended, or close a
                                                 failed one
  start WORKFLOW [--input JSON] [--key K] [--correlation C]
                                                 queue a run for a worker that has the workflow
  send EVENT [--data JSON]                       send an event (wakes waits, starts triggered runs)
  stats                                          counts, pending depth and age, retries, failures
  schedules [remove ID]                          list schedules, or remove one
  metrics                                        the Prometheus metrics of the file
  events purge --older-than AGE                  delete events older than AGE (e.g. 7d) that
                                                 no waiting run needs
  serve [--address A] [--port P] [--token T]     HTTP API, /metrics and dashboard over the file
  version                                        the version of this durable (also --version)

  --db DATABASE   an SQLite file (default durable.db) or a postgresql:// URI
  --json          print the answer as JSON
exit codes: 0 done, 1 failed, 2 bad usage, 3 not found, 4 refused by the run's state
)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The command line after the global flags: the command, its positional arguments, its flags.
struct Command {
  std::string name;
  std::vector<std::string> args;
  std::map<std::string, std::string> flags;

  std::string flag(const std::string& name_, std::string fallback = {}) const {
    const auto it = flags.find(name_);
    return it == flags.end() ? fallback : it->second;
  }
};

// What a command accepts; check_usage holds every command line to it before anything opens the
// database. Help (`help`, `--help`, `-h`) and `--version` are answered before this.
struct Syntax {
  std::string_view name;
  std::vector<std::string_view> flags;
  std::size_t min_args = 0, max_args = 0;
  std::string_view first_arg = {};  // what the first argument is: "show needs a run id"
};

const std::vector<Syntax>& syntaxes() {
  static const std::vector<Syntax> kSyntax = {
      {"runs", {"status", "workflow", "correlation", "limit"}},
      {"show", {}, 1, 1, "a run id"},
      {"steps", {}, 1, 1, "a run id"},
      {"retry", {}, 1, 1, "a run id"},
      {"cancel", {"reason"}, 1, 1, "a run id"},
      {"start", {"input", "key", "correlation"}, 1, 1, "a workflow name"},
      {"send", {"data"}, 1, 1, "an event name"},
      {"stats", {}},
      {"schedules", {}, 0, 2},
      {"metrics", {}},
      {"events", {"older-than"}, 1, 1, "a subcommand (purge)"},
      {"serve", {"address", "port", "token"}},
      {"version", {}}};
  return kSyntax;
}

// "; did you mean 'X'?" for the candidate nearest to `word`, when it is near enough to be a typo
// (at most two edits, fewer than half the word's letters); otherwise empty.
std::string did_you_mean(std::string_view word, const std::vector<std::string_view>& candidates,
                         std::string_view prefix = "") {
  // The names other tools give these commands: a user of kubectl, Temporal or a queue types them.
  static const std::map<std::string_view, std::string_view> kSynonyms = {
      {"list", "runs"},     {"ls", "runs"},          {"ps", "runs"},      {"get", "show"},
      {"describe", "show"}, {"inspect", "show"},     {"rerun", "retry"},  {"kill", "cancel"},
      {"stop", "cancel"},   {"terminate", "cancel"}, {"submit", "start"}, {"trigger", "start"},
      {"signal", "send"},   {"emit", "send"},        {"publish", "send"}};
  if (const auto it = kSynonyms.find(word);
      it != kSynonyms.end() &&
      std::find(candidates.begin(), candidates.end(), it->second) != candidates.end()) {
    return "; did you mean '" + std::string(prefix) + std::string(it->second) + "'?";
  }
  std::string_view best;
  std::size_t best_distance = 3;
  for (std::string_view candidate : candidates) {
    const std::size_t d = edit_distance(word, candidate);
    if (d < best_distance && 2 * d < std::max(word.size(), candidate.size())) {
      best = candidate;
      best_distance = d;
    }
  }
  return best.empty() ? "" : "; did you mean '" + std::string(prefix) + std::string(best) + "'?";
}

std::string joined(const std::vector<std::string_view>& words, std::string_view prefix = "") {
  std::string text;
  for (std::string_view w : words)
    text += (text.empty() ? "" : ", ") + std::string(prefix) + std::string(w);
  return text;
}

// Throws a UsageError naming the first thing wrong with the command line, whether or not a
// database is there; the values of flags are checked where they are read, also before it.
void check_usage(const Command& cmd) {
  const auto& all = syntaxes();
  const auto syntax =
      std::find_if(all.begin(), all.end(), [&](const Syntax& s) { return s.name == cmd.name; });
  if (syntax == all.end()) {
    std::vector<std::string_view> names;
    for (const Syntax& s : all) names.push_back(s.name);
    throw UsageError("unknown command '" + cmd.name + "'" + did_you_mean(cmd.name, names) +
                     "\nthe commands: " + joined(names) + ", help");
  }
  for (const auto& [flag, value] : cmd.flags) {
    if (std::find(syntax->flags.begin(), syntax->flags.end(), flag) != syntax->flags.end()) {
      continue;
    }
    throw UsageError(cmd.name + " takes no flag --" + flag +
                     did_you_mean(flag, syntax->flags, "--") +
                     (syntax->flags.empty() ? std::string(" (it takes none)")
                                            : " (it takes " + joined(syntax->flags, "--") + ")"));
  }
  if (cmd.args.size() < syntax->min_args) {
    throw UsageError(cmd.name + " needs " + std::string(syntax->first_arg));
  }
  if (cmd.args.size() > syntax->max_args) {
    throw UsageError("too many arguments for " + cmd.name + ": '" + cmd.args[syntax->max_args] +
                     "' is one more than it takes");
  }
  if (cmd.name == "schedules" && !cmd.args.empty()) {
    if (cmd.args[0] != "remove") {
      throw UsageError("schedules takes 'remove ID' or nothing, not '" + cmd.args[0] + "'");
    }
    if (cmd.args.size() < 2) throw UsageError("schedules remove needs a schedule id");
  }
  if (cmd.name == "events") {
    if (cmd.args[0] != "purge") throw UsageError("events takes 'purge', not '" + cmd.args[0] + "'");
    if (cmd.flag("older-than").empty()) {
      throw UsageError("events purge needs --older-than AGE (e.g. 7d)");
    }
  }
}

// A mistyped --db is a usage mistake, and must not leave an empty database behind. Called by
// each command once its own arguments are read, before it opens the file. A PostgreSQL URI is
// checked by connecting to it.
void require_database(const std::string& database) {
  if (durable::detail::is_postgres_uri(database)) return;
  if (std::error_code ignored; !std::filesystem::is_regular_file(database, ignored)) {
    throw UsageError("no database at '" + database + "'; pass --db FILE or --db postgresql://URI");
  }
}

json parse_json(const std::string& text, const char* what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // not only parse errors: 1e999 is out_of_range.406
    throw UsageError(std::string(what) + " is not valid JSON: " + e.what());
  }
}

std::string shown(const json& value, std::size_t limit = 120) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > limit) text = text.substr(0, limit - 3) + "...";
  return text;
}

std::string text_of(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// Prints rows as columns, each as wide as its widest cell.
void table(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out << "  " << line << '\n';
  }
}

void print_counts(std::ostream& out, const json& answer) {
  out << "  ";
  for (const auto& [status, n] : answer.at("counts").items()) out << status << ' ' << n << "  ";
  out << "(total " << answer.at("total") << ")\n";
}

// A run's status, "running (orphaned)" when its holder's lease lapsed.
std::string status_of(const json& run) {
  const bool orphaned = run.contains("orphaned") && run.at("orphaned").get<bool>();
  return text_of(run, "status") + (orphaned ? " (orphaned)" : "");
}

// The width to fit the runs list to: COLUMNS when it is set (as ls reads it), else the
// terminal's; 0 when the output is a pipe or a file, where nothing is cut.
std::size_t output_width() {
  if (const char* columns = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long n = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && n > 0) return static_cast<std::size_t>(n);
  }
  winsize size{};
  if (::isatty(STDOUT_FILENO) == 1 && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0) {
    return size.ws_col;
  }
  return 0;
}

// An error's note in the runs list, at most `budget` bytes: its first line, cut at a word
// boundary when too long. Whatever is left out is marked with a trailing " …"; returns whether
// anything was.
bool fit_note(std::string& text, std::size_t budget) {
  bool cut = false;
  if (const std::size_t eol = text.find_first_of("\r\n"); eol != std::string::npos) {
    text.erase(eol);
    cut = true;
  }
  if (text.size() + (cut ? 2 : 0) > budget) {
    std::size_t end = budget > 2 ? budget - 2 : 0;  // room for " …", one column wide
    const std::size_t space = text.rfind(' ', end);
    if (space != std::string::npos && space >= end / 2) {
      end = space;  // a word boundary, unless that would drop more than half of what fits
    } else {
      while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // UTF-8
    }
    text.erase(end);
    cut = true;
  }
  if (cut) text.erase(text.find_last_not_of(" ,:;") + 1) += " …";
  return cut;
}

// One row per run, grep-friendly. The last column holds a failed run's error: its first line
// in full when the output is not a terminal; on a terminal (or with COLUMNS) cut at a word to
// fit the width, though never under kMinNote. A line after the table says where the rest is.
void print_runs(std::ostream& out, const json& answer) {
  constexpr std::size_t kMinNote = 60;
  print_counts(out, answer);
  if (answer.at("runs").empty()) {
    out << "  no runs match\n";
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "WORKFLOW", "STATUS", "WORKER", "UPDATED", "INVOCATIONS", ""}};
  for (const json& run : answer.at("runs")) {
    std::string note = run.at("known").get<bool>() ? "" : "no worker has this workflow";
    if (run.contains("error")) note = text_of(run.at("error"), "message");
    rows.push_back({text_of(run, "id"), text_of(run, "workflow"), status_of(run),
                    text_of(run, "worker"), text_of(run, "updated_at"), text_of(run, "invocations"),
                    note});
  }
  std::size_t before_note = 2;  // table()'s indent, then each column and its gap
  for (std::size_t col = 0; col + 1 < rows[0].size(); ++col) {
    std::size_t widest = 0;
    for (const auto& row : rows) widest = std::max(widest, row[col].size());
    before_note += widest + 2;
  }
  const std::size_t width = output_width();
  const std::size_t budget =
      width == 0 ? std::string::npos
                 : std::max(kMinNote, width > before_note ? width - before_note : 0);
  bool cut = false;
  for (auto& row : rows) cut = fit_note(row.back(), budget) || cut;
  out << '\n';
  table(out, rows);
  if (cut) out << "\n  an error ending in … is cut short here: durable show ID prints it in full\n";
}

void print_steps(std::ostream& out, const json& steps) {
  if (steps.empty()) {
    out << "  no steps journaled yet\n";
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"#", "STEP", "KIND", "STATUS", "ATTEMPTS", "DURATION", "UPDATED", "RESULT"}};
  int n = 0;
  for (const json& s : steps) {
    const std::string duration = s.contains("duration_ms")
                                     ? std::to_string(s.at("duration_ms").get<long long>()) + " ms"
                                     : "-";
    std::string result = s.at("output").is_null() ? "" : shown(s.at("output"), 50);
    // In full: what a step waits for and why one failed are what `show` is read for.
    if (const json& wait = s.at("output");
        text_of(s, "kind") == "event" && text_of(s, "status") == "waiting" && wait.is_object()) {
      result = "event '" + text_of(wait, "event") + "'";
      if (wait.contains("match") && !wait.at("match").empty()) {
        result +=
            " matching " + wait.at("match").dump(-1, ' ', false, json::error_handler_t::replace);
      }
    }
    if (s.contains("error")) {
      result = text_of(s.at("error"), "type") + ": " + text_of(s.at("error"), "message");
    }
    if (s.contains("wake_at"))
      result += (result.empty() ? "until " : " (until ") + text_of(s, "wake_at") +
                (result.empty() ? "" : ")");
    rows.push_back({std::to_string(++n), text_of(s, "id"), text_of(s, "kind"), text_of(s, "status"),
                    text_of(s, "attempts"), duration, text_of(s, "updated_at"), result});
  }
  table(out, rows);
}

void print_run(std::ostream& out, const json& run) {
  std::string status = status_of(run);
  for (char& c : status) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  out << "run " << text_of(run, "id") << " (" << text_of(run, "workflow") << ")  " << status
      << "\n";
  std::vector<std::vector<std::string>> rows = {{"correlation", text_of(run, "correlation_id")},
                                                {"created", text_of(run, "created_at")},
                                                {"updated", text_of(run, "updated_at")},
                                                {"invocations", text_of(run, "invocations")},
                                                {"input", shown(run.at("input"))},
                                                {"output", shown(run.at("output"))}};
  if (run.contains("wake_at")) rows.push_back({"next due", text_of(run, "wake_at")});
  if (run.contains("parent_id")) rows.push_back({"parent", text_of(run, "parent_id")});
  if (run.contains("worker")) rows.push_back({"held by", text_of(run, "worker")});
  if (run.contains("lease_until")) {
    const bool orphaned = run.contains("orphaned") && run.at("orphaned").get<bool>();
    rows.push_back({"lease until", text_of(run, "lease_until") +
                                       (orphaned ? " (lapsed: orphaned, the next claim by any "
                                                   "worker takes the run over)"
                                                 : "")});
  }
  if (!run.at("known").get<bool>()) {
    rows.push_back({"warning", "no worker has registered workflow '" + text_of(run, "workflow") +
                                   "': the run waits for one that has it"});
  }
  if (run.contains("error")) {
    const json& e = run.at("error");
    rows.push_back({"error", text_of(e, "type") + ": " + text_of(e, "message")});
  }
  table(out, rows);
  out << "\nsteps\n";
  print_steps(out, run.at("steps"));
  out << "\nhistory\n";
  std::vector<std::vector<std::string>> history;
  for (const json& t : run.at("history")) {
    history.push_back({text_of(t, "at"), text_of(t, "status"), text_of(t, "reason")});
  }
  table(out, history);
  if (run.at("runbook").is_null()) return;
  const json& book = run.at("runbook");
  out << "\nrunbook\n  what failed  " << text_of(book, "summary") << "\n  where        "
      << (text_of(book, "failed_step") == "" ? "the workflow function"
                                             : "step '" + text_of(book, "failed_step") + "'")
      << ", failed at " << text_of(book, "failed_at") << "\n  how often    "
      << text_of(book, "similar_failures")
      << " other failed run(s) of this workflow at this step in the last 24 h\n  check\n";
  for (const json& check : book.at("checks")) out << "    - " << check.get<std::string>() << '\n';
  out << "  retry        " << text_of(book, "retry_command") << '\n';
}

std::string seconds(double s) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(s < 10 ? 3 : 0) << s << " s";
  return text.str();
}

void print_stats(std::ostream& out, const json& s) {
  print_counts(out, s);
  const json& age = s.at("oldest_pending_age_seconds");
  table(out, {{"pending depth", text_of(s, "pending_depth")},
              {"oldest pending", age.is_null() ? "-" : seconds(age.get<double>())},
              {"steps", text_of(s, "steps")},
              {"retries", text_of(s, "retries")},
              {"failed runs", text_of(s, "failed_runs")},
              {"failed steps", text_of(s, "failed_steps")},
              {"workers", text_of(s, "workers")},
              {"workflows", shown(s.at("workflows"))}});
}

void print_schedules(std::ostream& out, const json& answer) {
  if (answer.at("schedules").empty()) {
    out << "  no schedules\n";
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "WORKFLOW", "EVERY", "CRON", "NEXT", "FIRED", "LEFT"}};
  for (const json& s : answer.at("schedules")) {
    const long long every = s.at("every_ms").get<long long>();
    rows.push_back({text_of(s, "id"), text_of(s, "workflow"),
                    every == 0 ? "-" : std::to_string(every) + " ms", text_of(s, "cron"),
                    text_of(s, "next_at"), text_of(s, "fired"), text_of(s, "remaining")});
  }
  table(out, rows);
}

// `durable serve`: the HTTP API, metrics and dashboard until SIGINT or SIGTERM.
int serve(const std::string& database, const Command& cmd) {
  ops::HttpOptions http;
  http.address = cmd.flag("address", "127.0.0.1");
  const std::string port = cmd.flag("port", "8080");
  try {
    const int value = std::stoi(port);
    if (value < 0 || value > 65535 || std::to_string(value) != port) throw std::out_of_range(port);
    http.port = static_cast<unsigned short>(value);
  } catch (const std::exception&) {
    throw UsageError("--port must be a number from 0 to 65535, not '" + port + "'");
  }
  http.token = cmd.flag("token");
  if (http.token.empty()) {
    if (const char* env = std::getenv("DURABLE_TOKEN")) http.token = env;
  }
  if (const auto invalid = ops::detail::invalid_token(http.token)) throw UsageError(*invalid);
  require_database(database);
  // The signals are taken by sigwait below: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ops::Admin admin(database);
  http.static_responses = ops::static_pages();
  ops::HttpServer server(http, ops::api_handler(admin));
  // The first line names the address (scripts read the port from it). The second is for whoever
  // expects this to run their workflows: a run started here waits for a worker.
  std::cout << "durable: serving " << database << " at " << server.url()
            << " (dashboard at /, API at /v1, metrics at /metrics)\n"
            << "durable: this serves the database only and runs no workflow code: a run started or "
               "retried here waits for a worker, a program of yours that adds its workflow to a "
               "durable::Runtime and calls Runtime::serve() (docs/runtime.md)"
            << std::endl;
  int received = 0;
  sigwait(&signals, &received);
  std::cout << "durable: stopping (signal " << received << ")" << std::endl;
  server.stop();
  return kOk;
}

// Prints an answer as JSON (--json) or as text; returns kOk.
struct Answer {
  bool as_json = false;
  int operator()(const json& j, void (*print)(std::ostream&, const json&)) const {
    if (as_json) {
      std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
    } else {
      print(std::cout, j);
    }
    return kOk;
  }
};

// `durable events purge --older-than 7d`: what serve() does on its own with
// RuntimeOptions::event_retention, for a file no runtime serves.
int purge_events(const std::string& database, const Answer& answer, const Command& cmd) {
  const std::string age = cmd.flag("older-than");
  std::chrono::milliseconds older_than{};
  try {
    older_than = durable::detail::parse_duration(age);
  } catch (const durable::Error& e) {
    throw UsageError(std::string("--older-than: ") + e.what());
  }
  require_database(database);
  const auto store = durable::detail::open_store(database, durable::Durability::normal);
  const std::int64_t before = durable::detail::to_ms(durable::Clock::now()) - older_than.count();
  constexpr std::size_t kBatch = 1000;  // one short write transaction each
  std::size_t deleted = 0;
  for (std::size_t n = kBatch; n == kBatch; deleted += n) n = store->purge_events(before, kBatch);
  if (answer.as_json) {
    std::cout << json{{"deleted", deleted}}.dump(2) << '\n';
  } else {
    std::cout << "deleted " << deleted << " event(s) older than " << age << '\n';
  }
  return kOk;
}

// The database, once the command's own arguments are read. Commands that only read open it
// read-only.
ops::Admin open_admin(const std::string& database, bool read_only) {
  require_database(database);
  return ops::Admin(database, {}, {}, durable::Durability::normal, 8, read_only);
}

ops::RunQuery run_query(const Command& cmd) {
  ops::RunQuery query;
  if (const std::string s = cmd.flag("status"); !s.empty()) {
    query.status = durable::status_from_string(s);
    if (!query.status) {
      std::vector<std::string_view> names;
      for (int i = 0; i <= static_cast<int>(durable::Status::cancelled); ++i) {
        names.push_back(durable::to_string(static_cast<durable::Status>(i)));
      }
      throw UsageError("unknown status '" + s + "'" + did_you_mean(s, names) +
                       " (the statuses: " + joined(names) + ")");
    }
  }
  query.workflow = cmd.flag("workflow");
  query.correlation_id = cmd.flag("correlation");
  const std::string limit = cmd.flag("limit", "50");
  try {
    const int value = std::stoi(limit);
    if (value < 1 || value > 100000 || std::to_string(value) != limit) throw std::out_of_range("");
    query.limit = static_cast<std::size_t>(value);
  } catch (const std::exception&) {
    throw UsageError("--limit must be a number from 1 to 100000, not '" + limit + "'");
  }
  return query;
}

// The commands that read: runs, show, steps, stats, schedules (the list), metrics.
int read_command(const std::string& database, const Answer& answer, const Command& cmd) {
  if (cmd.name == "runs") {
    const ops::RunQuery query = run_query(cmd);
    return answer(open_admin(database, true).list_runs(query), print_runs);
  }
  ops::Admin admin = open_admin(database, true);
  if (cmd.name == "show") return answer(admin.show_run(cmd.args[0]), print_run);
  if (cmd.name == "steps") {
    return answer(admin.run_steps(cmd.args[0]),
                  [](std::ostream& o, const json& j) { print_steps(o, j.at("steps")); });
  }
  if (cmd.name == "stats") return answer(admin.stats(), print_stats);
  if (cmd.name == "schedules") return answer(admin.list_schedules(), print_schedules);
  std::cout << admin.metrics();
  return kOk;
}

int start_run(const std::string& database, const Answer& answer, const Command& cmd) {
  ops::StartRequest start;
  start.workflow = cmd.args[0];
  start.input = parse_json(cmd.flag("input", "{}"), "--input");
  start.idempotency_key = cmd.flag("key");
  start.correlation_id = cmd.flag("correlation");
  start.queue_unknown = true;
  const json started = open_admin(database, false).start_run(start);
  if (!started.at("known").get<bool>()) {
    std::cerr << "durable: warning: no worker has registered workflow '" << start.workflow
              << "'; the run is queued and waits for one that has it\n";
  }
  return answer(started, [](std::ostream& o, const json& j) {
    o << (j.at("created").get<bool>() ? "started run " : "the key names run ") << text_of(j, "id")
      << '\n';
  });
}

// The commands that write: retry, cancel, send, schedules remove (start above).
int write_command(const std::string& database, const Answer& answer, const Command& cmd) {
  if (cmd.name == "start") return start_run(database, answer, cmd);
  if (cmd.name == "send") {
    const json data = parse_json(cmd.flag("data", "{}"), "--data");
    const json sent = open_admin(database, false).send_event(cmd.args[0], data);
    return answer(sent, [](std::ostream& o, const json& j) {
      o << "sent event " << text_of(j, "id") << ": woke " << j.at("woken") << " waiting run(s), "
        << "started " << j.at("started").size() << '\n';
    });
  }
  ops::Admin admin = open_admin(database, false);
  if (cmd.name == "schedules") {
    const std::string& id = cmd.args[1];
    admin.remove_schedule(id);
    return answer({{"id", id}, {"removed", true}}, [](std::ostream& o, const json& j) {
      o << "removed schedule " << text_of(j, "id") << '\n';
    });
  }
  const std::string& id = cmd.args[0];
  const json done =
      cmd.name == "retry" ? admin.retry_run(id) : admin.cancel_run(id, cmd.flag("reason"));
  return answer(done, [](std::ostream& o, const json& j) {
    o << "run " << text_of(j, "id") << " is now " << text_of(j, "status") << '\n';
  });
}

int run_command(const std::string& database, bool as_json, const Command& cmd) {
  check_usage(cmd);
  const Answer answer{as_json};
  if (cmd.name == "version") {
    std::cout << "durable " << durable::version() << '\n';
    return kOk;
  }
  if (cmd.name == "serve") return serve(database, cmd);
  if (cmd.name == "events") return purge_events(database, answer, cmd);
  static const std::set<std::string> kReaders = {"runs", "show", "steps", "stats", "metrics"};
  if (kReaders.contains(cmd.name) || (cmd.name == "schedules" && cmd.args.empty())) {
    return read_command(database, answer, cmd);
  }
  return write_command(database, answer, cmd);
}

}  // namespace

int main(int argc, char** argv) {
  std::string database = "durable.db";
  bool as_json = false;
  Command cmd;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string word = argv[i];
      // "help" and "version" are commands only in the command's place: `start version` starts
      // a workflow of that name.
      if (word == "--help" || word == "-h" || (word == "help" && cmd.name.empty())) {
        std::cout << kUsageText;
        return kOk;
      }
      if (word == "--version") {
        std::cout << "durable " << durable::version() << '\n';
        return kOk;
      }
      if (word == "--json") {
        as_json = true;
      } else if (word.starts_with("--")) {
        if (i + 1 >= argc) throw UsageError(word + " needs a value");
        const std::string value = argv[++i];
        if (word == "--db") {
          database = value;
        } else {
          cmd.flags[word.substr(2)] = value;
        }
      } else if (cmd.name.empty()) {
        cmd.name = word;
      } else {
        cmd.args.push_back(word);
      }
    }
    if (cmd.name.empty()) throw UsageError("no command given");
    return run_command(database, as_json, cmd);
  } catch (const UsageError& e) {
    std::cerr << "durable: " << e.what() << "\n(durable --help lists the commands)\n";
    return kUsage;
  } catch (const durable::NotFound& e) {
    std::cerr << "durable: " << e.what() << '\n';
    return kNotFound;
  } catch (const ops::Conflict& e) {
    std::cerr << "durable: " << e.what() << '\n';
    return kConflict;
  } catch (const ops::BadRequest& e) {
    std::cerr << "durable: " << e.what() << '\n';
    return kUsage;
  } catch (const std::exception& e) {
    std::cerr << "durable: " << e.what() << '\n';
    return kFailed;
  }
}
