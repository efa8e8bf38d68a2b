// SPDX-License-Identifier: Apache-2.0
// The durable command as a new user meets it: a mistyped command line is named as such before
// any database is looked for, errors and wait matches are readable without losing text, and
// `durable serve` says that it runs no workflow code. Then a missing database, events purge and
// serve's token. (ops_test.cpp covers each command's answers and exit codes.)

#include <SQLiteCpp/SQLiteCpp.h>
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "stores.hpp"
#include "support.hpp"
#include "tls_support.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::has;
using test::quiet;
using test::shell;

namespace {

// Runs the durable command in `dir` (which holds no durable.db unless a test made one); returns
// its exit code and what it printed on stdout and stderr. COLUMNS is unset unless `columns`.
std::pair<int, std::string> cli_in(const test::TempDir& dir, const std::string& args,
                                   const std::string& columns = "") {
  const std::string env = columns.empty() ? "env -u COLUMNS " : "env COLUMNS=" + columns + " ";
  return test::run_shell("cd '" + dir.path().string() + "' && " + env + DURABLE_CLI + " " + args +
                         " 2>&1");
}

const RetryPolicy kOnce{.max_attempts = 1, .initial_backoff = 1ms, .jitter = 0};

// The line of `out` that holds `part`; empty when none does.
std::string line_with(const std::string& out, const std::string& part) {
  const std::size_t at = out.find(part);
  if (at == std::string::npos) return "";
  const std::size_t begin = out.rfind('\n', at) + 1;  // npos + 1 == 0: the first line
  return out.substr(begin, out.find('\n', at) - begin);
}

// What `fd` gives until it has given `lines` lines, or until `deadline` has passed (a server that
// printed fewer lines would otherwise block the test for good).
std::string lines_within(int fd, int lines, std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  std::string text;
  while (std::count(text.begin(), text.end(), '\n') < lines) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd readable{.fd = fd, .events = POLLIN, .revents = 0};
    if (left.count() <= 0 || ::poll(&readable, 1, static_cast<int>(left.count())) <= 0) break;
    std::array<char, 512> buffer{};
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n <= 0) break;
    text.append(buffer.data(), static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace

TEST_CASE("durable command: a mistyped command line is named, not the missing database") {
  test::TempDir dir;  // no durable.db here: each mistake must still be named as such
  const std::vector<std::pair<std::string, std::string>> mistakes = {
      {"lst", "unknown command 'lst'"},
      {"list", "unknown command 'list'; did you mean 'runs'?"},
      {"servee --port 0", "unknown command 'servee'; did you mean 'serve'?"},
      {"runs --stauts failed", "runs takes no flag --stauts; did you mean '--status'?"},
      {"runs --status faild", "unknown status 'faild'; did you mean 'failed'?"},
      {"runs --limit 0", "--limit must be a number from 1 to 100000, not '0'"},
      {"show", "show needs a run id"},
      {"stats extra", "too many arguments for stats"},
      {"schedules rmeove s1", "schedules takes 'remove ID' or nothing, not 'rmeove'"},
      {"schedules remove", "schedules remove needs a schedule id"},
      {"events list --older-than 1d", "events takes 'purge', not 'list'"},
      {"events purge", "events purge needs --older-than AGE"},
      {"events purge --older-than soon", "--older-than: "},
      {"start signup --input '{oops'", "--input is not valid JSON"},
      {"send go --data '[1'", "--data is not valid JSON"},
      {"serve --port x", "--port must be a number from 0 to 65535, not 'x'"},
      {"cancel r1 --because late", "cancel takes no flag --because (it takes --reason, "}};
  for (const auto& mistake : mistakes) {
    const auto& args = mistake.first;  // not a structured binding: clang 14 cannot capture one
    const auto& message = mistake.second;
    CAPTURE(args);
    const auto [code, out] = cli_in(dir, args);
    CHECK(code == 2);
    CHECK(has(out, "durable: " + message));
    CHECK_FALSE(has(out, "no database"));
  }
  // An unknown command lists the commands there are.
  CHECK(has(cli_in(dir, "frobnicate").second,
            "the commands: runs, show, steps, retry, cancel, purge, pause, resume, fork, resolve, "
            "start, send, published, tail, message, stats, schedules, metrics, events, serve, "
            "verify, forget, version, help"));
  // A command line that is right goes on to look for the database.
  const auto [code, out] = cli_in(dir, "runs --status failed --limit 5");
  CHECK(code == 2);
  CHECK(has(out, "no database at 'durable.db'; pass --db FILE"));
  CHECK_FALSE(std::filesystem::exists(dir.file("durable.db")));
  // "version" and "help" are commands only in the command's place.
  CHECK(has(cli_in(dir, "start version").second, "no database"));
  CHECK(cli_in(dir, "version").second == std::string("durable ") + DURABLE_VERSION_STRING + "\n");
}

TEST_CASE(
    "durable runs: an error is cut at a word only to fit a terminal, and show has it whole (on "
    "each store)") {
  test::TempDir dir;
  // SQLite: durable.db in the directory, the command's default; PostgreSQL: --db.
  const std::string db = test::database(dir, "durable.db");
  const std::string at = test::on_postgres() ? "--db '" + db + "' " : "";
  const std::string long_error =
      "the import of batch 7 from the partner feed failed because the upstream server closed the "
      "connection after 30 s; retry once the partner confirms the feed is back";
  std::string failed;
  {
    Runtime runtime(quiet(db));
    runtime.add(Workflow("import", [&](Step& step, const json&) -> json {
      return step.run("fetch", [&]() -> int { throw std::runtime_error(long_error); },
                      {.retry = kOnce});
    }));
    failed = runtime.start("import");
    REQUIRE(runtime.wait(failed, 5s).status == Status::failed);
  }
  // Not a terminal (a pipe, a file): the error's line in full, nothing marked as cut.
  auto [code, out] = cli_in(dir, at + "runs");
  CHECK(code == 0);
  CHECK(has(line_with(out, failed), long_error));
  CHECK_FALSE(has(out, "…"));
  // A terminal 120 columns wide: the error gets the 60 columns the rule allows, cut after a
  // word, with the ellipsis and a line that says where the rest is.
  std::tie(code, out) = cli_in(dir, at + "runs", "120");
  CHECK(code == 0);
  const std::string row = line_with(out, failed);
  CHECK(has(row, "  the import of batch 7 from the partner feed failed because …"));
  CHECK_FALSE(has(row, "upstream"));
  CHECK(has(out, "durable show ID prints it in full"));
  // Wide enough, nothing is cut.
  std::tie(code, out) = cli_in(dir, at + "runs", "400");
  CHECK(has(line_with(out, failed), long_error));
  CHECK_FALSE(has(out, "…"));
  // show prints the whole error, in the run's fields and in its step timeline.
  std::tie(code, out) = cli_in(dir, at + "show " + failed, "80");
  CHECK(code == 0);
  CHECK(has(line_with(out, "  error  "), "std::runtime_error: " + long_error));
  CHECK(has(line_with(out, "  fetch  "), "std::runtime_error: " + long_error));
}

TEST_CASE(
    "durable runs: an error of several lines shows its first line and a marked ellipsis (on each "
    "store)") {
  test::TempDir dir;
  // SQLite: durable.db in the directory, the command's default; PostgreSQL: --db.
  const std::string db = test::database(dir, "durable.db");
  const std::string at = test::on_postgres() ? "--db '" + db + "' " : "";
  std::string failed;
  {
    Runtime runtime(quiet(db));
    runtime.add(Workflow("parse", [](Step& step, const json&) -> json {
      return step.run(
          "read",
          []() -> int { throw std::runtime_error("bad record at line 3\n  expected a number"); },
          {.retry = kOnce});
    }));
    failed = runtime.start("parse");
    REQUIRE(runtime.wait(failed, 5s).status == Status::failed);
  }
  const auto [code, out] = cli_in(dir, at + "runs");
  CHECK(code == 0);
  CHECK(has(line_with(out, failed), "  bad record at line 3 …"));
  CHECK_FALSE(has(out, "expected a number"));
  CHECK(has(out, "durable show ID prints it in full"));
  CHECK(
      has(cli_in(dir, at + "show " + failed).second, "bad record at line 3\n  expected a number"));
}

TEST_CASE(
    "durable show: a wait's match and a caught step's error are printed in full (on each store)") {
  test::TempDir dir;
  // SQLite: durable.db in the directory, the command's default; PostgreSQL: --db.
  const std::string db = test::database(dir, "durable.db");
  const std::string at = test::on_postgres() ? "--db '" + db + "' " : "";
  const json match = {{"order_id", "ord-2024-000123"},
                      {"warehouse", "rotterdam-north-2"},
                      {"carrier", "a carrier with a rather long name"}};
  const std::string hotel_error =
      "no room left at the Grand Hotel Esplanade for the nights of 12 to 15 March, not even the "
      "suite; try the sister hotel";
  std::string waiting;
  {
    Runtime runtime(quiet(db));
    runtime.add(Workflow("ship", [&](Step& step, const json&) -> json {
      try {
        step.run("book-hotel", [&]() -> int { throw std::runtime_error(hotel_error); },
                 {.retry = kOnce});
      } catch (const StepFailed&) {
      }
      return step.wait_for_event("picked-up", "parcel.picked_up", {.match = match}).has_value();
    }));
    waiting = runtime.start("ship");
    runtime.run_until_idle();
    REQUIRE(runtime.get(waiting).status == Status::waiting);
  }
  for (const std::string command : {"show ", "steps "}) {
    CAPTURE(command);
    const auto [code, out] = cli_in(dir, at + command + waiting, "80");
    CHECK(code == 0);
    CHECK(has(line_with(out, "picked-up"), "event 'parcel.picked_up' matching " + match.dump()));
    CHECK(has(line_with(out, "book-hotel"), "std::runtime_error: " + hotel_error));
  }
}

TEST_CASE(
    "durable serve: the start-up message says it runs no workflow code, and what does (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "app.db");
  { Runtime runtime(quiet(db)); }
  test::ServeProcess serve(DURABLE_CLI, db);
  const std::string printed = lines_within(serve.fd(), 2, 10s);
  const int status = serve.stop();
  const std::size_t eol = printed.find('\n');
  REQUIRE(eol != std::string::npos);
  const std::string first = printed.substr(0, eol), second = printed.substr(eol + 1);
  CHECK(has(first, "durable: serving " + db + " at http://127.0.0.1:"));
  CHECK(has(second, "durable: this serves the database only and runs no workflow code"));
  CHECK(has(second, "a run started or retried here waits for a worker"));
  CHECK(has(second, "durable::Runtime and calls Runtime::serve() (docs/runtime.md)"));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

// --- The command on a missing database, events purge, and serve's token ---

TEST_CASE("durable command: a missing database is bad usage (exit 2), and no file is made") {
  test::TempDir dir;
  const std::string typo = dir.file("typo.db");
  for (const char* command :
       {"runs", "show r1", "steps r1", "stats", "schedules", "metrics", "start signup", "send go",
        "retry r1", "cancel r1", "schedules remove s1", "events purge --older-than 7d", "serve"}) {
    CAPTURE(command);
    const auto [code, out] = shell(std::string(DURABLE_CLI) + " --db '" + typo + "' " + command);
    CHECK(code == 2);
    CHECK(has(out, "no database at '" + typo + "'; pass --db FILE"));
    CHECK_FALSE(std::filesystem::exists(typo));
  }
  // The default path, durable.db in the working directory.
  const auto [code, out] = shell("cd '" + dir.path().string() + "' && " + DURABLE_CLI + " runs");
  CHECK(code == 2);
  CHECK(has(out, "no database at 'durable.db'"));
  CHECK_FALSE(std::filesystem::exists(dir.file("durable.db")));
  // A mistyped command is named as such, whether or not the database is there.
  const auto unknown = shell(std::string(DURABLE_CLI) + " --db '" + typo + "' frobnicate");
  CHECK(unknown.first == 2);
  CHECK(has(unknown.second, "unknown command 'frobnicate'"));
}

TEST_CASE("durable command: events purge deletes old events, and keeps the newest") {
  test::TempDir dir;
  const std::string db = dir.file("events.db");
  {
    // The manual clock stands in 2025, so these events are months old for the command, which
    // reads the real one.
    test::ManualClock clock;
    auto runtime = test::runtime_on(db, clock, quiet(db));
    for (int i = 0; i < 3; ++i) runtime->send_event("old", {{"i", i}});
  }
  const std::string cli = std::string(DURABLE_CLI) + " --db '" + db + "' ";
  CHECK(shell(cli + "events purge").first == 2);                    // no --older-than
  CHECK(shell(cli + "events purge --older-than soon").first == 2);  // not a duration
  CHECK(shell(cli + "events list --older-than 1d").first == 2);     // no such subcommand
  CHECK(json::parse(shell(cli + "--json events purge --older-than 10000d").second).at("deleted") ==
        0);
  const auto [code, out] = shell(cli + "--json events purge --older-than 1d");
  CHECK(code == 0);
  CHECK(json::parse(out).at("deleted") == 2);
  SQLite::Database check(db, SQLite::OPEN_READONLY);
  CHECK(check.execAndGet("SELECT count(*) FROM events").getInt() == 1);
}

TEST_CASE(
    "durable serve: a token with a space or a control character is bad usage (exit 2) (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "app.db");
  { Runtime runtime({.database = db}); }
  const std::string serve = std::string(DURABLE_CLI) + " --db '" + db + "' serve --port 0";
  for (const std::string token : {"' '", "'two words'", "\"$(printf 'a\\tb')\""}) {
    CAPTURE(token);
    const auto [code, out] = shell(serve + " --token " + token);
    CHECK(code == 2);
    CHECK(has(out, "bearer token"));
  }
  const auto [code, out] = shell("DURABLE_TOKEN=' ' " + serve);
  CHECK(code == 2);
  CHECK(has(out, "bearer token"));
}

// The JSON the command takes on its command line meets the limits the API's bodies meet: a
// number no double holds and a value nested past the depth limit are bad usage, named as such,
// and nothing is written.
TEST_CASE(
    "durable command: --input and --data out of range or nested too deep are bad usage (exit 2) "
    "(on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "app.db");
  { Runtime runtime({.database = db}); }
  const std::string cli = std::string(DURABLE_CLI) + " --db '" + db + "' ";
  // 20,000 levels: far past the limit, and still within one command-line argument (128 KiB).
  const std::string deep = std::string(20'000, '[') + std::string(20'000, ']');
  const std::string range = "is not valid JSON";  // nlohmann's number overflow, named
  const std::string nested = "nested more than 64 levels deep";
  for (const auto& [line, expected] : std::vector<std::pair<std::string, std::string>>{
           {"start signup --input '{\"n\":1e999}'", range},
           {"start signup --input '" + deep + "'", nested},
           {"send go --data 1e999", range},
           {"send go --data '" + deep + "'", nested}}) {
    const std::string command = line.substr(0, 60);  // clang 14 captures no structured binding
    CAPTURE(command);
    const auto [code, out] = shell(cli + line);
    CHECK(code == 2);
    CHECK(has(out, expected));
  }
  const auto [code, out] = shell(cli + "--json stats");
  REQUIRE(code == 0);
  CHECK(json::parse(out).at("total") == 0);
}

TEST_CASE(
    "durable serve: --tls-cert, --tls-key and --signing-secret-file serve HTTPS to signed "
    "clients (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "app.db");
  { Runtime runtime({.database = db}); }
  const auto certificate = test::tls::make_self_signed(dir.path(), "server");
  const std::string secret = std::string(32, 'k');
  const std::string secret_file = dir.file("secret");
  std::ofstream(secret_file) << secret << "\n";  // as `openssl rand -hex 32 > FILE` writes it
  test::ServeProcess serve(DURABLE_CLI, db, {},
                           {"--tls-cert", certificate.cert_file, "--tls-key", certificate.key_file,
                            "--signing-secret-file", secret_file});
  const std::string first = lines_within(serve.fd(), 1, 10s);
  const std::string prefix = "at https://127.0.0.1:";
  const std::size_t at = first.find(prefix);
  REQUIRE(at != std::string::npos);
  const auto port = static_cast<unsigned short>(std::stoi(first.substr(at + prefix.size())));
  test::tls::Client client(port, certificate.cert_file);
  CHECK(client.exchange(test::tls::http::verb::get, "/v1/stats").result_int() == 401);
  const std::string signature = test::tls::signature_header(
      secret, "GET", "/v1/stats", test::tls::unix_now(), "cli-test-nonce-01", "");
  CHECK(client.exchange(test::tls::http::verb::get, "/v1/stats", "", signature).result_int() ==
        200);
}

TEST_CASE("durable serve: TLS files and the signing secret are checked before serving") {
  test::TempDir dir;
  const std::string db = dir.file("app.db");
  { Runtime runtime({.database = db}); }
  const auto certificate = test::tls::make_self_signed(dir.path(), "server");
  const std::string serve = std::string(DURABLE_CLI) + " --db '" + db + "' serve --port 0 ";
  std::ofstream(dir.file("short")) << "too short\n";
  std::ofstream(dir.file("empty")) << "\n";
  struct Case {
    std::string flags;
    int code;
    std::string expected;
  };
  for (const Case& bad : {
           Case{"--tls-cert '" + certificate.cert_file + "'", 2,
                "TLS needs both --tls-cert and --tls-key"},
           Case{"--signing-secret-file '" + dir.file("missing") + "'", 2,
                "cannot read the signing secret file"},
           Case{"--signing-secret-file '" + dir.file("short") + "'", 2, "at least 32"},
           Case{"--signing-secret-file '" + dir.file("empty") + "'", 2, "is empty"},
           Case{"--tls-cert '" + dir.file("missing.crt") + "' --tls-key '" + certificate.key_file +
                    "'",
                1, "missing.crt"},
       }) {
    CAPTURE(bad.flags);
    const auto [code, out] = shell(serve + bad.flags);
    CHECK(code == bad.code);
    CHECK(has(out, bad.expected));
  }
  const auto [code, out] = shell("DURABLE_SIGNING_SECRET=short " + serve);
  CHECK(code == 2);
  CHECK(has(out, "DURABLE_SIGNING_SECRET"));
}

TEST_CASE("durable command: runs pages with --after the cursor it printed, and refuses another") {
  test::TempDir dir;
  const std::string db = dir.file("pages.db");
  std::vector<std::string> started;
  {
    Runtime runtime(quiet(db));
    runtime.add(Workflow("nightly", [](Step&, const json&) -> json { return nullptr; }));
    for (int i = 0; i < 5; ++i) started.insert(started.begin(), runtime.start("nightly"));
  }
  const std::string cli = std::string(DURABLE_CLI) + " --db '" + db + "' ";
  std::vector<std::string> listed;
  std::string after;
  for (int page = 0; page < 5; ++page) {
    const auto [code, out] =
        shell(cli + "--json runs --limit 2" + (after.empty() ? "" : " --after " + after));
    REQUIRE(code == 0);
    const json answer = json::parse(out);
    for (const json& run : answer.at("runs")) listed.push_back(run.at("id"));
    if (answer.at("next_cursor").is_null()) break;
    after = answer.at("next_cursor");
  }
  CHECK(listed == started);
  // The text output names the next page's cursor.
  const auto [code, out] = shell(cli + "runs --limit 4");
  CHECK(code == 0);
  CHECK(has(out, "more runs: the same command with --after "));
  const auto refused = shell(cli + "runs --after page-two 2>&1");
  CHECK(refused.first == 2);
  CHECK(has(refused.second, "--after must be a cursor a list of runs printed"));
}
