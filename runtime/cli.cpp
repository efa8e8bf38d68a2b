// SPDX-License-Identifier: Apache-2.0
// The durable command: what operators ask of a database, answered in seconds. The standalone
// `durable` binary (runtime/cli_main.cpp) runs it with no workflow code; durable::cli_main runs
// it inside the application's own binary, where verify, start, resolve and serve know the
// application's workflows.
//
//   durable [--db DATABASE] [--json] COMMAND [ARGS]
//
// Exit codes a script can rely on: 0 done; 1 failed (the database could not be read or
// written); 2 bad usage (unknown command or flag, malformed JSON, no database at the path);
// 3 no such run or schedule; 4 the run's state refuses it (retry of a run that is not failed);
// 5 verify found runs the code would not replay.
//
// The command line is checked in full (command, subcommand, flags, arguments and their values)
// before the database is looked for, so that a mistyped command is named as such in any folder.
//
// Commands that only read (runs, show, steps, stats, schedules, metrics, verify) open the
// database read-only: they work on a file this user may not write, and never migrate or create
// one.

#include <signal.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <durable/cli.hpp>
#include <durable/version.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "admin.hpp"
#include "api.hpp"
#include "bulk.hpp"
#include "cli_data.hpp"
#include "cli_print.hpp"
#include "cli_published.hpp"
#include "cli_streams.hpp"
#include "cli_usage.hpp"
#include "durations.hpp"
#include "env.hpp"
#include "errors_internal.hpp"
#include "http_checks.hpp"
#include "http_server.hpp"
#include "ids.hpp"
#include "run_requests.hpp"
#include "runtime_core.hpp"
#include "store.hpp"

using durable::json;
namespace ops = durable::ops;
using durable::detail::cli::check_usage;
using durable::detail::cli::Command;
using durable::detail::cli::command_payloads;
using durable::detail::cli::did_you_mean;
using durable::detail::cli::joined;
using durable::detail::cli::kUsageText;
using durable::detail::cli::payloads;
using durable::detail::cli::print_run;
using durable::detail::cli::print_runs;
using durable::detail::cli::print_schedules;
using durable::detail::cli::print_stats;
using durable::detail::cli::print_steps;
using durable::detail::cli::print_verify;
using durable::detail::cli::published_command;
using durable::detail::cli::tail_command;
using durable::detail::cli::text_of;
using durable::detail::cli::UsageError;
namespace cli = durable::detail::cli;

namespace {

enum Exit { kOk = 0, kFailed = 1, kUsage = 2, kNotFound = 3, kConflict = 4, kDiverged = 5 };

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

// `durable serve`: the HTTP API, metrics and dashboard until SIGINT or SIGTERM.
// "a, b, c": the workflows the application added, for messages.
std::string added_names(durable::detail::RuntimeCore& core) {
  std::string names;
  for (const std::string& name : core.added_names()) names += (names.empty() ? "" : ", ") + name;
  return names.empty() ? "none" : names;
}

// `myapp durable serve`: the HTTP API over the database, and the program's worker loop on it
// (Runtime::serve, which returns on SIGINT or SIGTERM), so that runs started, retried or
// resolved here run, and a resolve is checked against the program's code. The program's own
// runtime serves when it is on that database; for another (a runtime on ":memory:", as the
// command's runtime should be), a runtime of the same options and workflows is made on it.
int serve_with_workflows(const std::string& database, ops::HttpOptions http,
                         durable::Runtime& app) {
  durable::detail::RuntimeCore& core = durable::detail::RuntimeAccess::core(app);
  std::unique_ptr<durable::Runtime> own;
  durable::Runtime* worker = &app;
  if (database != core.options().database) {
    durable::RuntimeOptions options = core.options();
    options.database = database;
    own = std::make_unique<durable::Runtime>(options);
    for (const std::string& name : core.added_names()) own->add(*core.added(name));
    worker = own.get();
  }
  durable::detail::RuntimeCore& serving = durable::detail::RuntimeAccess::core(*worker);
  ops::Admin admin(
      database, [&serving] { serving.wake(); }, {}, durable::Durability::normal, 8, false,
      payloads());  // its writes wake the worker loop
  admin.set_max_data_bytes(core.options().max_output_bytes);
  admin.set_resolve_check(
      [&core](const durable::detail::RecordedRun& run, const std::string& step,
              const json& output) { core.check_resolution(run, step, output); });
  http.static_responses = ops::static_pages();
  ops::HttpServer server(http, ops::api_handler(admin));
  std::cout << "durable: serving " << database << " at " << server.url()
            << " (dashboard at /, API at /v1, metrics at /metrics), and running this program's "
               "workflows: "
            << added_names(core) << std::endl;
  worker->serve();
  std::cout << "durable: stopped" << std::endl;
  server.stop();
  return kOk;
}

// The secret of signed requests: the file's bytes without a final line break, or else
// DURABLE_SIGNING_SECRET. Never a flag: any user of the host can read a command line.
std::string signing_secret(const Command& cmd) {
  const std::string path = cmd.flag("signing-secret-file");
  std::string secret;
  if (path.empty()) {
    if (const char* env = std::getenv("DURABLE_SIGNING_SECRET")) secret = env;
  } else {
    std::ifstream file(path, std::ios::binary);
    if (!file) throw UsageError("cannot read the signing secret file '" + path + "'");
    secret.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
    if (secret.empty()) throw UsageError("the signing secret file '" + path + "' is empty");
  }
  if (const auto invalid = ops::detail::invalid_signing_secret(secret)) {
    throw UsageError(*invalid + (path.empty() ? " (DURABLE_SIGNING_SECRET)" : " (" + path + ")"));
  }
  return secret;
}

int serve(const std::string& database, const Command& cmd, durable::Runtime* app) {
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
  http.signing_secret = signing_secret(cmd);
  http.tls_cert_file = cmd.flag("tls-cert");
  http.tls_key_file = cmd.flag("tls-key");
  if (http.tls_cert_file.empty() != http.tls_key_file.empty()) {
    throw UsageError("TLS needs both --tls-cert and --tls-key");
  }
  require_database(database);
  if (app != nullptr) return serve_with_workflows(database, http, *app);
  // The signals are taken by sigwait below: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ops::Admin admin(database, {}, {}, durable::Durability::normal, 8, false, payloads());
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
// `durable forget ID --key-file F`: Runtime::forget on a file no runtime of this process holds.
int forget(const std::string& database, const Answer& answer, const std::string& id) {
  if (!payloads() || !payloads()->encrypts()) {
    throw UsageError("forget needs --key-file F: the encryption key file of the database");
  }
  require_database(database);
  return answer(durable::detail::cli::forget(database, id), [](std::ostream& o, const json& j) {
    o << "forgot correlation id " << text_of(j, "correlation_id") << "; cancelled "
      << j.at("cancelled").size() << " unfinished run(s)\n";
  });
}

int purge_events(const std::string& database, const Answer& answer, const Command& cmd) {
  const std::string age = cmd.flag("older-than");
  std::chrono::milliseconds older_than{};
  try {
    older_than = durable::detail::parse_duration(age);
  } catch (const durable::Error& e) {
    throw UsageError("--older-than: " + std::string(durable::detail::message_of(e)));
  }
  require_database(database);
  const auto store = durable::detail::open_store(database, durable::Durability::normal, payloads());
  const std::int64_t before = durable::detail::Env::system().now_ms() - older_than.count();
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
  return ops::Admin(database, {}, {}, durable::Durability::normal, 8, read_only, payloads());
}

// --tag K=V,K=V.
std::map<std::string, std::string> tags_of(const std::string& text) {
  try {
    return durable::detail::tags_from_text(text);
  } catch (const durable::Error& e) {
    throw UsageError("--tag: " + std::string(durable::detail::message_of(e)));
  }
}

ops::RunQuery run_query(const Command& cmd) {
  ops::RunQuery query;
  if (const std::string s = cmd.flag("status"); !s.empty()) {
    query.status = durable::status_from_string(s);
    if (!query.status) {
      std::vector<std::string_view> names;
      for (int i = 0; i <= static_cast<int>(durable::Status::paused); ++i) {
        names.push_back(durable::to_string(static_cast<durable::Status>(i)));
      }
      throw UsageError("unknown status '" + s + "'" + did_you_mean(s, names) +
                       " (the statuses: " + joined(names) + ")");
    }
  }
  query.workflow = cmd.flag("workflow");
  query.correlation_id = cmd.flag("correlation");
  if (const std::string tags = cmd.flag("tag"); !tags.empty()) query.tags = tags_of(tags);
  query.cursor = cmd.flag("after");
  if (!query.cursor.empty() && !durable::detail::parse_run_cursor(query.cursor)) {
    throw UsageError("--after must be a cursor a list of runs printed, not '" + query.cursor + "'");
  }
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
    return answer(open_admin(database, true).list(query), print_runs);
  }
  ops::Admin admin = open_admin(database, true);
  if (cmd.name == "show") return answer(admin.show(cmd.args[0]), print_run);
  if (cmd.name == "steps") {
    return answer(admin.steps(cmd.args[0]),
                  [](std::ostream& o, const json& j) { print_steps(o, j.at("steps")); });
  }
  if (cmd.name == "stats") return answer(admin.stats(), print_stats);
  if (cmd.name == "schedules") return answer(admin.schedules(), print_schedules);
  std::cout << admin.metrics();
  return kOk;
}

// The command's context: the database, how to answer, and the application whose workflows it
// knows (null for the standalone durable binary).
struct Context {
  std::string database;
  Answer answer;
  durable::Runtime* app = nullptr;
  durable::detail::RuntimeCore* core() const {
    return app == nullptr ? nullptr : &durable::detail::RuntimeAccess::core(*app);
  }
};

int start_run(const Context& at, const Command& cmd) {
  ops::StartRequest start;
  start.workflow = cmd.args[0];
  start.input = parse_json(cmd.flag("input", "{}"), "--input");
  start.idempotency_key = cmd.flag("key");
  start.correlation_id = cmd.flag("correlation");
  start.deadline = cmd.flag("deadline");
  if (const std::string tags = cmd.flag("tag"); !tags.empty()) start.tags = tags_of(tags);
  if (const std::string priority = cmd.flag("priority"); !priority.empty()) {
    int value = 0;
    const auto [end, error] =
        std::from_chars(priority.data(), priority.data() + priority.size(), value);
    if (error != std::errc() || end != priority.data() + priority.size()) {
      throw UsageError("--priority takes a whole number, not '" + priority + "'");
    }
    start.priority = value;
  }
  start.queue_unknown = true;
  if (durable::detail::RuntimeCore* core = at.core()) {
    // In the application's binary, the workflow and its input are checked against its code.
    const auto workflow = core->added(start.workflow);
    if (workflow == nullptr) {
      throw ops::BadRequest("this program has no workflow '" + start.workflow +
                            "' (it has: " + added_names(*core) + ")");
    }
    try {
      workflow->check_input(start.input);
    } catch (const durable::InvalidInput& e) {
      throw ops::BadRequest(std::string(durable::detail::message_of(e)));
    }
  }
  const json started = open_admin(at.database, false).start(start);
  if (!started.at("known").get<bool>() && at.app == nullptr) {
    std::cerr << "durable: warning: no worker has registered workflow '" << start.workflow
              << "'; the run is queued and waits for one that has it\n";
  }
  return at.answer(started, [](std::ostream& o, const json& j) {
    o << (j.at("created").get<bool>() ? "started run " : "the key names run ") << text_of(j, "id")
      << '\n';
  });
}

// `verify`: Runtime::verify of the database's unfinished runs against the application's code,
// read-only; exit code 5 when a run would not replay.
int verify(const Context& at, const Command& cmd) {
  durable::detail::RuntimeCore* core = at.core();
  if (core == nullptr) {
    throw UsageError(
        "verify replays runs against a program's workflows, and this durable command has none: "
        "run it from your program, which hands its command line to durable::cli_main "
        "(docs/versioning.md)");
  }
  const ops::RunQuery query = run_query(cmd);
  durable::RunFilter filter;
  filter.status = query.status;
  filter.workflow = query.workflow;
  filter.correlation_id = query.correlation_id;
  if (at.database.empty() || at.database == ":memory:") {
    throw UsageError("verify needs --db DATABASE: the database whose runs to check");
  }
  require_database(at.database);
  const durable::VerifyReport report = core->verify(filter, at.database);
  json divergences = json::array();
  for (const durable::Divergence& d : report.divergences) {
    divergences.push_back({{"run_id", d.run_id},
                           {"workflow", d.workflow},
                           {"step", d.step},
                           {"message", d.message},
                           {"where", d.where}});
  }
  at.answer({{"runs_checked", report.runs_checked},
             {"ok", report.ok()},
             {"divergences", std::move(divergences)}},
            print_verify);
  return report.ok() ? kOk : kDiverged;
}

// The repairs: fork an ended run from a step, resolve a failed step by hand.
int repair(const Context& at, const Command& cmd) {
  const std::string& id = cmd.args[0];
  if (cmd.name == "fork") {
    const json forked = open_admin(at.database, false).fork(id, cmd.flag("from"));
    return at.answer(forked, [](std::ostream& o, const json& j) {
      o << "forked run " << text_of(j, "forked_from") << ": new run " << text_of(j, "id") << '\n';
    });
  }
  const json output = parse_json(cmd.flag("output"), "--output");
  ops::Admin admin = open_admin(at.database, false);
  if (durable::detail::RuntimeCore* core = at.core()) {
    admin.set_resolve_check(
        [core](const durable::detail::RecordedRun& run, const std::string& step,
               const json& value) { core->check_resolution(run, step, value); });
  }
  const json done = admin.resolve(id, cmd.args[1], output, cmd.flag("reason"));
  return at.answer(done, [](std::ostream& o, const json& j) {
    o << "step '" << text_of(j, "step") << "' of run " << text_of(j, "id")
      << " resolved; the run is now " << text_of(j, "status") << '\n';
  });
}

// retry, cancel and purge over the runs of a filter: what they would change with --dry-run.
int bulk(const Context& at, ops::Admin& admin, const Command& cmd) {
  ops::RunQuery query = run_query(cmd);
  query.failed_step = cmd.flag("failed-step");
  query.error_type = cmd.flag("error-type");
  const std::int64_t now = durable::detail::Env::system().now_ms();
  for (const char* name : {"since", "until"}) {
    const std::string text = cmd.flag(name);
    if (text.empty()) continue;
    std::optional<durable::Clock::time_point> at_time = durable::detail::parse_utc_time(text);
    if (!at_time) {
      try {
        // "2h": two hours ago.
        at_time = durable::Clock::time_point(
            std::chrono::milliseconds(now - durable::detail::parse_duration(text).count()));
      } catch (const durable::Error&) {
        throw UsageError(std::string("--") + name + " takes a UTC time (2026-11-27T18:00:00Z) " +
                         "or a duration before now (2h), not '" + text + "'");
      }
    }
    (std::string_view(name) == "since" ? query.created_after : query.created_before) = at_time;
  }
  if (!query.any_condition() && cmd.flag("all").empty()) {
    throw UsageError(cmd.name + " needs a run id, or a filter (--status, --workflow, --tag, " +
                     "--failed-step, --error-type, --since...), or --all");
  }
  const auto action = cmd.name == "retry"    ? durable::detail::BulkAction::retry
                      : cmd.name == "cancel" ? durable::detail::BulkAction::cancel
                                             : durable::detail::BulkAction::purge;
  const json done = admin.bulk(action, query, !cmd.flag("dry-run").empty(), cmd.flag("reason"));
  return at.answer(done, [](std::ostream& o, const json& j) {
    const std::string name = text_of(j, "action");
    if (j.contains("matched")) {
      o << name << " would act on " << j.at("matched") << " run(s) (dry run: nothing changed)\n";
    } else {
      o << name << ": " << j.at("changed") << " run(s)\n";
    }
  });
}

// pause RUN, pause --workflow W, and the same of resume.
int pause_or_resume(const Context& at, ops::Admin& admin, const Command& cmd) {
  const std::string workflow = cmd.flag("workflow");
  if (cmd.args.empty() == workflow.empty()) {
    throw UsageError(cmd.name + " needs a run id or --workflow NAME (one of the two)");
  }
  const bool pause = cmd.name == "pause";
  if (!workflow.empty()) {
    const json done = pause ? admin.pause_workflow(workflow) : admin.resume_workflow(workflow);
    return at.answer(done, [](std::ostream& o, const json& j) {
      const bool paused = j.contains("paused");
      o << "workflow " << text_of(j, "workflow") << (paused ? " paused: " : " resumed: ")
        << j.at(paused ? "paused" : "resumed") << " run(s)\n";
    });
  }
  const std::string& id = cmd.args[0];
  json done = pause ? admin.pause(id) : admin.resume(id);
  if (pause && text_of(done, "status") == "running") done["pausing"] = true;
  return at.answer(done, [](std::ostream& o, const json& j) {
    o << "run " << text_of(j, "id") << " is now " << text_of(j, "status");
    if (j.value("pausing", false)) o << "; it pauses at its next step";
    o << '\n';
  });
}

// The commands that write: retry, cancel, pause, resume, send, schedules remove (start, fork,
// resolve above).
int write_command(const Context& at, const Command& cmd) {
  const Answer& answer = at.answer;
  if (cmd.name == "start") return start_run(at, cmd);
  if (cmd.name == "fork" || cmd.name == "resolve") return repair(at, cmd);
  if (cmd.name == "message") {
    const json data = parse_json(cmd.flag("data", "{}"), "--data");
    ops::Admin admin = open_admin(at.database, false);
    return answer(cli::send_message(admin, cmd.args[0], cmd.args[1], data), cli::print_message);
  }
  if (cmd.name == "send") {
    const json data = parse_json(cmd.flag("data", "{}"), "--data");
    const json sent = open_admin(at.database, false).send_event(cmd.args[0], data);
    return answer(sent, [](std::ostream& o, const json& j) {
      o << "sent event " << text_of(j, "id") << ": woke " << j.at("woken") << " waiting run(s), "
        << "started " << j.at("started").size() << '\n';
    });
  }
  ops::Admin admin = open_admin(at.database, false);
  if (cmd.name == "schedules") {
    const std::string& id = cmd.args[1];
    admin.unschedule(id);
    return answer({{"id", id}, {"removed", true}}, [](std::ostream& o, const json& j) {
      o << "removed schedule " << text_of(j, "id") << '\n';
    });
  }
  if (cmd.name == "pause" || cmd.name == "resume") return pause_or_resume(at, admin, cmd);
  if (cmd.name == "purge" || cmd.args.empty()) return bulk(at, admin, cmd);
  for (const char* filter : {"status", "workflow", "correlation", "tag", "failed-step",
                             "error-type", "since", "until", "dry-run", "all"}) {
    if (!cmd.flag(filter).empty()) {
      throw UsageError(cmd.name + " of one run takes no --" + filter +
                       " (a filter, for every run it matches, is given instead of a run id)");
    }
  }
  const std::string& id = cmd.args[0];
  const json done = cmd.name == "retry" ? admin.retry(id) : admin.cancel(id, cmd.flag("reason"));
  return answer(done, [](std::ostream& o, const json& j) {
    o << "run " << text_of(j, "id") << " is now " << text_of(j, "status") << '\n';
  });
}

int run_command(const Context& at, const Command& cmd) {
  check_usage(cmd);
  if (cmd.name == "version") {
    std::cout << "durable " << durable::version() << '\n';
    return kOk;
  }
  if (cmd.name == "serve") return serve(at.database, cmd, at.app);
  if (cmd.name == "verify") return verify(at, cmd);
  if (cmd.name == "events") return purge_events(at.database, at.answer, cmd);
  if (cmd.name == "forget") return forget(at.database, at.answer, cmd.args[0]);
  if (cmd.name == "published") {
    ops::Admin admin = open_admin(at.database, true);
    return published_command(admin, cmd.args[0], cmd.args[1], cmd.flag("wait"), at.answer.as_json);
  }
  if (cmd.name == "tail") {
    ops::Admin admin = open_admin(at.database, true);
    return tail_command(admin, cmd.args[0], cmd.args[1], cmd.flag("from"), at.answer.as_json);
  }
  static const std::set<std::string> kReaders = {"runs", "show", "steps", "stats", "metrics"};
  if (kReaders.contains(cmd.name) || (cmd.name == "schedules" && cmd.args.empty())) {
    return read_command(at.database, at.answer, cmd);
  }
  return write_command(at, cmd);
}

}  // namespace

namespace durable {

namespace detail {

int cli_main(int argc, char** argv, Runtime* app) {
  Context at;
  std::string key_file;  // --key-file
  at.app = app;
  at.database = app == nullptr ? "durable.db" : RuntimeAccess::core(*app).options().database;
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
        at.answer.as_json = true;
      } else if (word == "--dry-run" || word == "--all") {
        cmd.flags[word.substr(2)] = "yes";  // switches: no value
      } else if (word.starts_with("--")) {
        if (i + 1 >= argc) throw UsageError(word + " needs a value");
        const std::string value = argv[++i];
        if (word == "--db") {
          at.database = value;
        } else if (word == "--key-file") {
          key_file = value;
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
    check_usage(cmd);
    try {
      payloads() = command_payloads(app, key_file);
    } catch (const durable::Error& e) {
      throw UsageError("--key-file: " + std::string(durable::detail::message_of(e)));
    }
    return run_command(at, cmd);
  } catch (const UsageError& e) {
    std::cerr << "durable: " << e.what() << "\n(durable --help lists the commands)\n";
    return kUsage;
  } catch (const NotFound& e) {
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

}  // namespace detail

int cli_main(int argc, char** argv, Runtime& runtime) {
  return detail::cli_main(argc, argv, &runtime);
}

}  // namespace durable
