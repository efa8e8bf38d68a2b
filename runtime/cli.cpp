// SPDX-License-Identifier: Apache-2.0
// The durable command: what operators ask of a database file, answered in seconds.
//
//   durable [--db FILE] [--json] COMMAND [ARGS]
//
// Exit codes a script can rely on: 0 done; 1 failed (the database could not be read or
// written); 2 bad usage (unknown command or flag, malformed JSON, no database at the path);
// 3 no such run or schedule; 4 the run's state refuses it (retry of a run that is not failed).
//
// Commands that only read (runs, show, steps, stats, schedules, metrics) open the file
// read-only: they work on a file this user may not write, and never migrate or create one.

#include <signal.h>

#include <cstdio>
#include <durable/version.hpp>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "admin.hpp"
#include "api.hpp"
#include "durations.hpp"
#include "http_checks.hpp"
#include "http_server.hpp"
#include "store.hpp"

using durable::json;
namespace ops = durable::ops;

namespace {

enum Exit { kOk = 0, kFailed = 1, kUsage = 2, kNotFound = 3, kConflict = 4 };

constexpr const char* kUsageText = R"(usage: durable [--db FILE] [--json] COMMAND [ARGS]

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

  --db FILE   the database (default durable.db)   --json   print the answer as JSON
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
  const std::string& arg(std::size_t i, const char* what) const {
    if (i >= args.size()) throw UsageError(name + " needs " + what);
    return args[i];
  }
  void allow(std::initializer_list<const char*> known, std::size_t max_args) const {
    for (const auto& [flag_name, value] : flags) {
      bool ok = false;
      for (const char* k : known) ok = ok || flag_name == k;
      if (!ok) throw UsageError(name + " takes no flag --" + flag_name);
    }
    if (args.size() > max_args) throw UsageError("too many arguments for " + name);
  }
};

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

void print_runs(std::ostream& out, const json& answer) {
  print_counts(out, answer);
  if (answer.at("runs").empty()) {
    out << "  no runs match\n";
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "WORKFLOW", "STATUS", "WORKER", "UPDATED", "INVOCATIONS", ""}};
  for (const json& run : answer.at("runs")) {
    std::string note;
    if (!run.at("known").get<bool>()) note = "no worker has this workflow";
    if (run.contains("error")) note = text_of(run.at("error"), "message").substr(0, 60);
    rows.push_back({text_of(run, "id"), text_of(run, "workflow"), status_of(run),
                    text_of(run, "worker"), text_of(run, "updated_at"), text_of(run, "invocations"),
                    note});
  }
  out << '\n';
  table(out, rows);
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
    if (s.contains("error")) {
      result = text_of(s.at("error"), "type") + ": " + text_of(s.at("error"), "message");
      if (result.size() > 100) result = result.substr(0, 97) + "...";
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
  cmd.allow({"address", "port", "token"}, 0);
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
  // The signals are taken by sigwait below: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ops::Admin admin(database);
  http.static_responses = ops::static_pages();
  ops::HttpServer server(http, ops::api_handler(admin));
  std::cout << "durable: serving " << database << " at " << server.url()
            << " (dashboard at /, API at /v1, metrics at /metrics)" << std::endl;
  int received = 0;
  sigwait(&signals, &received);
  std::cout << "durable: stopping (signal " << received << ")" << std::endl;
  server.stop();
  return kOk;
}

// `durable events purge --older-than 7d`: what serve() does on its own with
// RuntimeOptions::event_retention, for a file no runtime serves.
int purge_events(const std::string& database, bool as_json, const Command& cmd) {
  cmd.allow({"older-than"}, 1);
  if (cmd.arg(0, "a subcommand (purge)") != "purge") {
    throw UsageError("events takes 'purge', not '" + cmd.args[0] + "'");
  }
  const std::string age = cmd.flag("older-than");
  if (age.empty()) throw UsageError("events purge needs --older-than AGE (e.g. 7d)");
  std::chrono::milliseconds older_than{};
  try {
    older_than = durable::detail::parse_duration(age);
  } catch (const durable::Error& e) {
    throw UsageError(std::string("--older-than: ") + e.what());
  }
  const auto store = durable::detail::open_sqlite_store(database, durable::Durability::normal);
  const std::int64_t before = durable::detail::to_ms(durable::Clock::now()) - older_than.count();
  constexpr std::size_t kBatch = 1000;  // one short write transaction each
  std::size_t deleted = 0;
  for (std::size_t n = kBatch; n == kBatch; deleted += n) n = store->purge_events(before, kBatch);
  const json done = {{"deleted", deleted}};
  if (as_json) {
    std::cout << done.dump(2) << '\n';
  } else {
    std::cout << "deleted " << deleted << " event(s) older than " << age << '\n';
  }
  return kOk;
}

// Commands that only read: the file is opened read-only.
bool reads_only(const Command& cmd) {
  static const std::set<std::string> kReaders = {"runs", "show", "steps", "stats", "metrics"};
  return kReaders.contains(cmd.name) || (cmd.name == "schedules" && cmd.args.empty());
}

int run_command(const std::string& database, bool as_json, const Command& cmd) {
  std::ostream& out = std::cout;
  const auto answer = [&](const json& j, void (*print)(std::ostream&, const json&)) {
    if (as_json) {
      out << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
    } else {
      print(out, j);
    }
    return kOk;
  };
  static const std::set<std::string> kCommands = {"runs",   "show",      "steps",   "retry",
                                                  "cancel", "start",     "send",    "stats",
                                                  "serve",  "schedules", "metrics", "events"};
  if (!kCommands.contains(cmd.name)) throw UsageError("unknown command '" + cmd.name + "'");
  // A mistyped --db is a usage mistake, and must not leave an empty database behind.
  if (std::error_code ignored; !std::filesystem::is_regular_file(database, ignored)) {
    throw UsageError("no database at '" + database + "'; pass --db FILE");
  }
  if (cmd.name == "serve") return serve(database, cmd);
  if (cmd.name == "events") return purge_events(database, as_json, cmd);
  ops::Admin admin(database, {}, {}, durable::Durability::normal, 8, reads_only(cmd));
  if (cmd.name == "runs") {
    cmd.allow({"status", "workflow", "limit", "correlation"}, 0);
    ops::RunQuery query;
    if (const std::string s = cmd.flag("status"); !s.empty()) {
      query.status = durable::status_from_string(s);
      if (!query.status) throw UsageError("unknown status '" + s + "'");
    }
    query.workflow = cmd.flag("workflow");
    query.correlation_id = cmd.flag("correlation");
    const std::string limit = cmd.flag("limit", "50");
    try {
      const int value = std::stoi(limit);
      if (value < 1 || value > 100000 || std::to_string(value) != limit)
        throw std::out_of_range("");
      query.limit = static_cast<std::size_t>(value);
    } catch (const std::exception&) {
      throw UsageError("--limit must be a number from 1 to 100000, not '" + limit + "'");
    }
    return answer(admin.list_runs(query), print_runs);
  }
  if (cmd.name == "show") {
    cmd.allow({}, 1);
    return answer(admin.show_run(cmd.arg(0, "a run id")), print_run);
  }
  if (cmd.name == "steps") {
    cmd.allow({}, 1);
    return answer(admin.run_steps(cmd.arg(0, "a run id")),
                  [](std::ostream& o, const json& j) { print_steps(o, j.at("steps")); });
  }
  if (cmd.name == "retry" || cmd.name == "cancel") {
    if (cmd.name == "retry") {
      cmd.allow({}, 1);
    } else {
      cmd.allow({"reason"}, 1);
    }
    const std::string& id = cmd.arg(0, "a run id");
    const json done =
        cmd.name == "retry" ? admin.retry_run(id) : admin.cancel_run(id, cmd.flag("reason"));
    return answer(done, [](std::ostream& o, const json& j) {
      o << "run " << text_of(j, "id") << " is now " << text_of(j, "status") << '\n';
    });
  }
  if (cmd.name == "start") {
    cmd.allow({"input", "key", "correlation"}, 1);
    ops::StartRequest start;
    start.workflow = cmd.arg(0, "a workflow name");
    start.input = parse_json(cmd.flag("input", "{}"), "--input");
    start.idempotency_key = cmd.flag("key");
    start.correlation_id = cmd.flag("correlation");
    start.queue_unknown = true;
    const json started = admin.start_run(start);
    if (!started.at("known").get<bool>()) {
      std::cerr << "durable: warning: no worker has registered workflow '" << start.workflow
                << "'; the run is queued and waits for one that has it\n";
    }
    return answer(started, [](std::ostream& o, const json& j) {
      o << (j.at("created").get<bool>() ? "started run " : "the key names run ") << text_of(j, "id")
        << '\n';
    });
  }
  if (cmd.name == "send") {
    cmd.allow({"data"}, 1);
    const json sent =
        admin.send_event(cmd.arg(0, "an event name"), parse_json(cmd.flag("data", "{}"), "--data"));
    return answer(sent, [](std::ostream& o, const json& j) {
      o << "sent event " << text_of(j, "id") << ": woke " << j.at("woken") << " waiting run(s), "
        << "started " << j.at("started").size() << '\n';
    });
  }
  if (cmd.name == "stats") {
    cmd.allow({}, 0);
    return answer(admin.stats(), print_stats);
  }
  if (cmd.name == "metrics") {
    cmd.allow({}, 0);
    std::cout << admin.metrics();
    return kOk;
  }
  if (cmd.name == "schedules") {
    cmd.allow({}, 2);
    if (cmd.args.empty()) return answer(admin.list_schedules(), print_schedules);
    if (cmd.args[0] != "remove") throw UsageError("schedules takes no '" + cmd.args[0] + "'");
    const std::string& id = cmd.arg(1, "a schedule id");
    admin.remove_schedule(id);
    return answer({{"id", id}, {"removed", true}}, [](std::ostream& o, const json& j) {
      o << "removed schedule " << text_of(j, "id") << '\n';
    });
  }
  throw UsageError("unknown command '" + cmd.name + "'");
}

}  // namespace

int main(int argc, char** argv) {
  std::string database = "durable.db";
  bool as_json = false;
  Command cmd;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string word = argv[i];
      if (word == "--help" || word == "-h" || word == "help") {
        std::cout << kUsageText;
        return kOk;
      }
      if (word == "--version" || word == "version") {
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
